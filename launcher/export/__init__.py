"""Descriptions of a profile's job for other systems (``distlaunch export TARGET``).

Each target is its own module (``tfjob.py``: a Kubeflow TFJob manifest). Exporters read a
validated Profile only; they never contact hosts.
"""
