"""Errors a user can act on. The CLI prints them as one line and exits 2."""

from __future__ import annotations


class UserError(Exception):
    """A mistake in the user's input or environment: one line naming the culprit and the fix."""

    exit_code = 2


class ProfileError(UserError):
    """A profile that cannot be loaded or validated. The message names file and key."""


class HostError(UserError):
    """A host that cannot be reached, authenticated or used."""


class HostGone(HostError):
    """A host that will not come back (its Slurm allocation ended): reconnecting is pointless."""
