"""The ML core's error family. The service maps each to an HTTP status in one place."""


class DockError(Exception):
    """Base class of every error the dock reports to a caller with a reason."""


class InvalidInput(DockError):
    """Inputs that cannot be used: empty texts, a single class, unknown labels."""


class IncompatibleSpec(DockError):
    """A spec of another space, of the wrong shape, or with non-finite values."""


class UnsafePackage(DockError):
    """A learnware package in a format the dock refuses to run (pickles, code)."""


class InvalidPackage(DockError):
    """A malformed learnware package: bad zip, bad manifest, missing files."""


class UnknownBase(DockError):
    """A base encoder that cannot be resolved on this machine."""
