"""``FeedbackOperator``: an email service's events loaded into the verdict store on a schedule
(PRODUCT.md, "Feedback"; docs/feedback.md), so that the next cleaning applies them.

It reads files (an export the email service drops in a folder or a bucket that a sensor or a
transfer put on the worker) or a table of a database connection (the generic shape ``email,
event, at[, bounce_type]``, e.g. a dbt model over the ESP's events in the warehouse) and calls
:func:`listhygiene.pipeline.add_feedback`; each event is kept once, so a DAG that loads the same
day twice (a retry, a backfill) adds nothing twice. The XCom is what was read and added.
"""

from collections.abc import Sequence
from typing import Any

from airflow.sdk import BaseHook, BaseOperator

from listhygiene_airflow.hooks.verification import ListHygieneHook, sqlalchemy_url, verdicts_url_of

__all__ = ["FeedbackOperator"]


class FeedbackOperator(BaseOperator):
    """Add feedback events to the verdict store.

    :param files: event exports (paths on the worker; globs are not expanded). Templated.
    :param format: ``auto`` (the default), ``sendgrid``, ``mailgun``, ``ses``, ``postmark`` or
        ``generic``.
    :param sql_conn_id: an Airflow database connection to read events from, with ``table`` or
        ``query`` (generic shape); instead of or beside ``files``.
    :param table: the events' table. Templated.
    :param query: a query giving the events. Templated.
    :param verdicts: the verdict store's URL. Templated. None: ``verdicts_conn_id``, then the
        ``listhygiene`` connection's ``verdicts_conn_id`` or ``verdicts`` extra, then
        ``LISTHYGIENE_VERDICTS``, else the worker's own cache file (as the cleaning's).
    :param verdicts_conn_id: an Airflow database connection holding the verdict store.
    :param listhygiene_conn_id: the ``listhygiene`` connection whose store extras apply.
    """

    template_fields: Sequence[str] = ("files", "table", "query", "verdicts")
    ui_color = "#e8f4ea"

    def __init__(
        self,
        *,
        files: Sequence[str] | str = (),
        format: str = "auto",
        sql_conn_id: str | None = None,
        table: str | None = None,
        query: str | None = None,
        verdicts: str | None = None,
        verdicts_conn_id: str | None = None,
        listhygiene_conn_id: str = ListHygieneHook.default_conn_name,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if not files and sql_conn_id is None:
            raise ValueError("give files or sql_conn_id (with table or query)")
        if sql_conn_id is not None and not (table or query):
            raise ValueError("sql_conn_id needs table or query")
        if verdicts and verdicts_conn_id:
            raise ValueError("give verdicts or verdicts_conn_id, not both")
        self.files: Any = files  # a template may render to a list (native rendering)
        self.format = format
        self.sql_conn_id = sql_conn_id
        self.table = table
        self.query = query
        self.verdicts = verdicts
        self.verdicts_conn_id = verdicts_conn_id
        self.listhygiene_conn_id = listhygiene_conn_id

    def _verdicts(self) -> str | None:
        if self.verdicts:
            return str(self.verdicts)
        if self.verdicts_conn_id:
            return verdicts_url_of(self.verdicts_conn_id)
        try:
            return ListHygieneHook(self.listhygiene_conn_id).verdicts_url()
        except Exception:  # no such connection: clean's own default store, as the cleaning's
            return None

    def execute(self, context: Any) -> dict[str, Any]:
        from listhygiene.pipeline import add_feedback

        store = self._verdicts()
        files = _paths(self.files)
        result = add_feedback(files, format=self.format, verdicts=store) if files else None
        if self.sql_conn_id is not None:
            url = sqlalchemy_url(BaseHook.get_connection(self.sql_conn_id))
            from_table = add_feedback(
                [url], verdicts=store, table=self.table or None, query=self.query or None
            )
            if result is None:
                result = from_table
            else:
                result.files += from_table.files
                result.added += from_table.added
                result.duplicates += from_table.duplicates
        assert result is not None
        for line in result.lines():
            self.log.info("%s", line)
        return result.as_dict()


def _paths(files: Any) -> list[str]:
    """The files as given or rendered: a path, a list of paths, or lists of them."""
    if isinstance(files, str):
        return [files] if files else []
    out: list[str] = []
    for item in files or ():
        out += _paths(item)
    return out
