"""``examples/quickstart.ipynb`` runs top to bottom in a real kernel and shows what it says.

The notebook is executed once per module with nbclient, from ``examples/`` as Jupyter would run
it, against the sample world's sandbox. Its output folder comes from ``QUICKSTART_OUT`` and its
temporary folders from ``TMPDIR``, both pointed at pytest's tmp folder, so nothing is written
into the repository.
"""

import ast
import os
import sys
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

ROOT = Path(__file__).resolve().parent.parent
EXAMPLES = ROOT / "examples"
NOTEBOOK = EXAMPLES / "quickstart.ipynb"

#: sample_data/README.md, "all 1,000" column: the CSV's statuses with check_smtp on.
CRM_COUNTS = {
    "valid": 802,
    "invalid": 162,
    "unknown": 3,
    "risky": 1,
    "disposable": 2,
    "catchall": 2,
    "role": 28,
}


class Executed:
    def __init__(self, notebook: nbformat.NotebookNode, out: Path, temp: Path) -> None:
        self.notebook, self.out, self.temp = notebook, out, temp

    def cell(self, cell_id: str) -> nbformat.NotebookNode:
        for cell in self.notebook.cells:
            if cell.get("id") == cell_id:
                return cell
        raise KeyError(f"no cell {cell_id!r} in the notebook")

    def html(self, cell_id: str) -> str:
        """What a code cell displayed as HTML (a rich display, as Jupyter renders it)."""
        return "\n".join(
            output.data["text/html"]
            for output in self.cell(cell_id).outputs
            if "data" in output and "text/html" in output.data
        )

    def text(self, cell_id: str) -> str:
        """What a code cell printed and displayed, as plain text."""
        parts = []
        for output in self.cell(cell_id).outputs:
            if output.output_type == "stream":
                parts.append(output.text)
            elif "data" in output:
                parts.append(output.data.get("text/plain", ""))
        return "\n".join(parts)


def table_rows(text: str, key: str) -> dict[str, list[str]]:
    """A printed DataFrame's rows, split on whitespace, by the value of column ``key``."""
    lines = text.splitlines()
    header = lines[0].split()
    at = header.index(key) + 1  # each row starts with its index
    return {words[at]: words[at + 1 :] for words in (line.split() for line in lines[1:]) if words}


def files_under(folder: Path) -> set[Path]:
    return {path.relative_to(folder) for path in folder.rglob("*")}


@pytest.fixture(scope="module")
def executed(tmp_path_factory: pytest.TempPathFactory) -> Executed:
    tmp = tmp_path_factory.mktemp("quickstart")
    out, temp = tmp / "out" / "quickstart", tmp / "tmp"
    temp.mkdir()
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    # In memory only: which interpreter the kernel runs on (it must be this virtualenv's).
    notebook.cells.append(
        nbformat.v4.new_code_cell("import sys\nprint(sys.prefix)", id="test-interpreter")
    )
    before = files_under(EXAMPLES)
    client = NotebookClient(
        notebook,
        timeout=300,
        kernel_name="python3",
        resources={"metadata": {"path": str(EXAMPLES)}},
    )
    with pytest.MonkeyPatch.context() as env:  # the kernel inherits this process's environment
        env.setenv("QUICKSTART_OUT", str(out))
        env.setenv("TMPDIR", str(temp))
        client.execute()  # raises CellExecutionError if a cell raises
    assert files_under(EXAMPLES) == before, "executing the notebook wrote into examples/"
    return Executed(notebook, out, temp)


def test_the_committed_notebook_has_no_outputs() -> None:
    notebook = nbformat.read(NOTEBOOK, as_version=4)
    nbformat.validate(notebook)
    code = [cell for cell in notebook.cells if cell.cell_type == "code"]
    assert code
    assert all(not cell.outputs and cell.execution_count is None for cell in code)
    assert notebook.metadata.kernelspec.name == "python3"


def test_every_cell_ran_without_error(executed: Executed) -> None:
    code = [cell for cell in executed.notebook.cells if cell.cell_type == "code"]
    assert all(cell.execution_count for cell in code)
    errors = [
        (cell.id, output.get("ename"))
        for cell in code
        for output in cell.outputs
        if output.output_type == "error"
    ]
    assert errors == []


def test_the_kernel_runs_on_this_virtualenv(executed: Executed) -> None:
    assert executed.text("test-interpreter").strip() == sys.prefix


def test_single_addresses(executed: Executed) -> None:
    one = ast.literal_eval(executed.text("verify-one"))
    assert (one["email"], one["status"], one["smtp_check"]) == (
        "alice.johnson@acme-corp.test",
        "valid",
        True,
    )
    many = table_rows(executed.text("verify-many"), "email")
    assert {email: words[:2] for email, words in many.items()} == {
        "bob.smith@acme-corp.test": ["valid", "NaN"],
        "nobody.here@acme-corp.test": ["invalid", "mailbox_not_found"],
        "nina.patel@fabrikam.test": ["catchall", "catch_all"],
        "info@contoso.test": ["role", "role_account"],
        "someone@parked-brand.test": ["invalid", "no_mail_server"],
    }


def test_the_crm_export_gets_the_documented_statuses(executed: Executed) -> None:
    assert ast.literal_eval(executed.text("counts")) == CRM_COUNTS
    assert executed.text("clean-csv").startswith(f"<CleanResult {executed.out}: 1000 rows")
    reasons = executed.text("invalid-reasons").split()
    for reason, count in [
        ("invalid_syntax", "83"),
        ("mailbox_not_found", "75"),
        ("no_mail_server", "3"),
        ("mailbox_disabled", "1"),
    ]:
        assert reasons[reasons.index(reason) + 1] == count
    unknown = executed.text("unknown-rows")
    assert all(word in unknown for word in ("blocked", "dns_error", "smtputf8_unsupported"))
    head = executed.text("valid-head")
    assert "Contact ID" in head
    assert "[5 rows x 24 columns]" in head


def test_the_result_renders_as_a_summary_in_the_notebook(executed: Executed) -> None:
    """``result`` as a cell's last line shows the counts with a bar per status, the checks and
    where the files are (``CleanResult._repr_html_``)."""
    import re

    shown = executed.html("clean-csv")
    assert "<strong>1,000 rows</strong> cleaned; quality checks <strong>passed</strong>" in shown
    rows = re.findall(
        r'<tr data-status="(\w+)"><td>\w+</td><td[^>]*>([\d,]+)</td>'
        r'<td><div style="background:#[0-9a-fA-F]{6};height:.8em;width:(\d+)px">',
        shown,
    )
    assert {status: int(count.replace(",", "")) for status, count, _ in rows} == CRM_COUNTS
    widths = {status: int(width) for status, _, width in rows}
    assert widths["valid"] == 200  # the biggest status has the full bar
    assert widths["valid"] > widths["invalid"] > widths["disposable"]
    assert f"<code>{executed.out}</code>" in shown
    assert (executed.out / "report.html").as_uri() in shown


def test_the_quality_checks_passed(executed: Executed) -> None:
    quality = executed.text("quality")
    assert quality.startswith("all checks passed: True")
    assert "rows_in_exactly_one_output" in quality
    assert "False" not in quality


def test_outputs_and_report_are_in_the_given_folder(executed: Executed) -> None:
    report = executed.out / "report.html"
    assert executed.text("report").splitlines()[0] == report.as_uri()
    assert report.is_file()
    assert {f"{status}.parquet" for status in CRM_COUNTS} | {"summary.json"} <= set(
        os.listdir(executed.out)
    )


def test_a_dataframe_is_cleaned_without_smtp_into_a_temporary_folder(executed: Executed) -> None:
    quick = executed.text("leads")
    assert quick.startswith(f"<CleanResult {executed.temp}{os.sep}listhygiene-")
    assert "6 rows (valid=3, invalid=1, disposable=1, role=1)" in quick
    rows = table_rows(executed.text("leads-all"), "lead_id")
    statuses = {lead: words[-2] for lead, words in rows.items()}
    # 103 bounces, but without the SMTP probe only its domain is checked
    assert statuses == {
        "101": "valid",
        "102": "valid",
        "103": "valid",
        "104": "role",
        "105": "disposable",
        "106": "invalid",
    }
