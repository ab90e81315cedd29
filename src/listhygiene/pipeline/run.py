"""The names of the pipeline's first release, kept where its users import them from.

New code imports from :mod:`listhygiene.pipeline` (or :mod:`listhygiene`); this module only
re-exports, so ``from listhygiene.pipeline.run import clean`` keeps working (docs/results.md).
"""

from listhygiene.errors import BackendError, PipelineError, QualityError, UnreachableError
from listhygiene.pipeline.api import aclean, asubmit, clean, submit
from listhygiene.pipeline.layout import STATUSES
from listhygiene.pipeline.result import CleanResult
from listhygiene.pipeline.runner import Progress

__all__ = [
    "STATUSES",
    "BackendError",
    "CleanResult",
    "PipelineError",
    "Progress",
    "QualityError",
    "UnreachableError",
    "aclean",
    "asubmit",
    "clean",
    "submit",
]
