"""Transfer a LoRA learnware to another base without training (BiCo, its baselines, UTD).

``registry.py`` declares the methods and their parameters; ``driver.py`` runs one
(``transfer_learnware``) and saves its result, a peft LoRA adapter for the target base (BiCo
family) or a post-pooling UTD operator; ``bico.py``, ``taskvec.py`` and ``utd.py`` hold the maths.
"""

from app.ml.transfer.driver import (
    TransferResult,
    base_model_type,
    check_pair,
    learnware_features,
    load_utd_operator,
    transfer_learnware,
)
from app.ml.transfer.registry import METHODS, OutputKind, TransferMethod, get_method
from app.ml.transfer.taskvec import UnsupportedPair
from app.ml.transfer.utd import UTDOperator, combine_operators

__all__ = [
    "METHODS",
    "OutputKind",
    "TransferMethod",
    "TransferResult",
    "UTDOperator",
    "UnsupportedPair",
    "base_model_type",
    "check_pair",
    "combine_operators",
    "get_method",
    "learnware_features",
    "load_utd_operator",
    "transfer_learnware",
]
