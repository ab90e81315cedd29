"""uvicorn's httptools protocol with the bytes of each request head bounded (docs/security.md).

httptools keeps a header value in memory until its line ends, however long; this protocol counts
the bytes of a head as they arrive and answers 431 (closing the connection) past
:data:`~listhygiene.service.guards.MAX_HEAD_BYTES`. A module of its own so that uvicorn's worker
processes can import the class by name, and so that nothing imports httptools unless it runs.
"""

import json

from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol

from listhygiene.service import FORM_A_ROOT, FORM_B_ROOT
from listhygiene.service.guards import MAX_HEAD_BYTES, refusal

__all__ = ["BoundedHttpToolsProtocol"]


class BoundedHttpToolsProtocol(HttpToolsProtocol):
    """httptools, with the bytes of each request head counted as they arrive."""

    _in_head = True
    _head_bytes = 0

    def on_message_begin(self) -> None:
        super().on_message_begin()
        self._in_head, self._head_bytes = True, 0

    def on_headers_complete(self) -> None:
        self._in_head = False
        super().on_headers_complete()

    def data_received(self, data: bytes) -> None:
        # Fed first, counted after: a chunk that completes a head and carries a body is not a
        # long head. What is held is bounded by the limit plus one read (256 KiB).
        super().data_received(data)
        if self._in_head and not self.transport.is_closing():
            self._head_bytes += len(data)
            if self._head_bytes > MAX_HEAD_BYTES:
                self._refuse()

    def _refuse(self) -> None:
        url = bytes(getattr(self, "url", None) or b"").decode("latin-1")
        if not url.startswith((FORM_A_ROOT, FORM_B_ROOT)):
            self.transport.close()  # no form to answer in: just close
            return
        error = refusal(url, f"a request head over {MAX_HEAD_BYTES} bytes")
        body = json.dumps(error.body()).encode()
        self.transport.write(
            b"HTTP/1.1 431 Request Header Fields Too Large\r\n"
            b"content-type: application/json\r\n"
            b"connection: close\r\n"
            b"content-length: " + str(len(body)).encode() + b"\r\n\r\n" + body
        )
        self.transport.close()
