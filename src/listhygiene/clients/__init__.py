"""httpx clients of a verification service in form A or form B (ours, or anyone's).

Sync and asyncio twins share one logic without I/O (``_core``: requests, parsing, retry
decisions; ``_limits``: the client-side rate limiter), so only the send path differs. Results
are the shared :class:`~listhygiene.results.VerificationResult`; the service's error answers
are the exceptions of :mod:`listhygiene.errors`; what is not an answer is a
:class:`ClientError`. See ``_core`` for what is retried, and why a job submission never is.
"""

from listhygiene.clients._config import (
    DEFAULT_API_KEY_HEADER,
    FORM_A_RATE_LIMITS,
    FORM_B_PLAN_LIMITS,
    ClientSettings,
)
from listhygiene.clients._exceptions import (
    ClientConnectionError,
    ClientError,
    ClientRateLimitError,
    ClientTimeoutError,
    SubmissionUncertainError,
    UnexpectedResponseError,
)
from listhygiene.clients._files import read_results_csv
from listhygiene.clients._form_a import AsyncFormAClient, FormAClient
from listhygiene.clients._form_b import AsyncFormBClient, FormBClient
from listhygiene.clients.events import Event, EventStore
from listhygiene.clients.models import (
    TERMINAL_STATUSES,
    BatchResult,
    BulkJob,
    FileJob,
    FileJobAccepted,
    FormACredits,
    FormBCredits,
    JobError,
    JobStatus,
    ResultsPage,
    Webhook,
)
from listhygiene.clients.receiver import Delivery, WebhookReceiver, WebhookRejected

__all__ = [
    "DEFAULT_API_KEY_HEADER",
    "FORM_A_RATE_LIMITS",
    "FORM_B_PLAN_LIMITS",
    "TERMINAL_STATUSES",
    "AsyncFormAClient",
    "AsyncFormBClient",
    "BatchResult",
    "BulkJob",
    "ClientConnectionError",
    "ClientError",
    "ClientRateLimitError",
    "ClientSettings",
    "ClientTimeoutError",
    "Delivery",
    "Event",
    "EventStore",
    "FileJob",
    "FileJobAccepted",
    "FormAClient",
    "FormACredits",
    "FormBClient",
    "FormBCredits",
    "JobError",
    "JobStatus",
    "ResultsPage",
    "SubmissionUncertainError",
    "UnexpectedResponseError",
    "Webhook",
    "WebhookReceiver",
    "WebhookRejected",
    "read_results_csv",
]
