"""``distlaunch profile``: a TensorFlow profiler capture of several tasks at once, and what TensorFlow's
own analysis says of it (issue 37)."""
