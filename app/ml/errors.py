"""The ML core's error family. The service maps each to an HTTP status in one place
(``app/api/errors.py``); the service's own errors live beside these in ``app/errors.py``."""


class DockError(Exception):
    """Base class of every error the dock reports to a caller with a reason."""


class InputError(DockError):
    """The caller's input is at fault (422): a job failing with one rejects its subject."""


class InvalidInput(InputError):
    """Inputs that cannot be used: empty texts, a single class, unknown labels."""


class IncompatibleSpec(InputError):
    """A spec of another space, of the wrong shape, or with non-finite values."""


class UnsafePackage(InputError):
    """A learnware package in a format the dock refuses to run (pickles, code)."""


class InvalidPackage(InputError):
    """A malformed learnware package: bad zip, bad manifest, missing files."""


class UnknownBase(InputError):
    """A base encoder that cannot be resolved on this machine."""
