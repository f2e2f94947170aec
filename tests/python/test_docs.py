"""The documents say what the code does: every journal kind dtd writes has its row in
docs/troubleshooting.md (and no row names a kind that does not exist), every systemd unit they tell
people to read or edit is one the templates install, and every link between the documents
resolves (scripts/check-links)."""
import re
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def journal_kinds():
    """The names of src/model/event.rs's `EventKind::X => "name"` arms."""
    text = (ROOT / "src/model/event.rs").read_text()
    kinds = set(re.findall(r'EventKind::[A-Za-z]+ => "([a-z_]+)"', text))
    assert len(kinds) > 30, f"found only {sorted(kinds)}: did event.rs change shape?"
    return kinds


def installed_units():
    """The systemd units the project installs: templates/systemd/*.service, and those the user
    data writes to /etc/systemd/system."""
    units = {p.stem for p in (ROOT / "templates/systemd").glob("*.service")}
    for script in (ROOT / "templates/user-data").glob("*.sh"):
        units |= set(re.findall(r"/etc/systemd/system/([A-Za-z0-9_.@-]+)\.service\b", script.read_text()))
    assert "dtd" in units, f"found only {sorted(units)}: did the templates change shape?"
    return units


# `journalctl -u UNIT` (with any options before -u) and `systemctl VERB UNIT`.
UNIT_NAMED = re.compile(r"\b(?:journalctl(?: -[a-zA-Z]+)* -u|systemctl (?:status|edit|restart|start|stop|"
                        r"enable|disable|cat|show|kill))\s+([A-Za-z0-9_.@-]+)")


def units_named(text):
    return {m.group(1).removesuffix(".service") for m in UNIT_NAMED.finditer(text)}


def table_rows(doc, section):
    """The first column (in backticks) of the table under `## section`."""
    text = (ROOT / doc).read_text()
    body = text.split(f"\n## {section}\n", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"^\| `([a-z_]+)` \|", body, re.M)


class Documents(unittest.TestCase):
    def test_every_journal_kind_is_explained_and_no_other(self):
        rows = table_rows("docs/troubleshooting.md", "Journal kinds")
        self.assertEqual(len(rows), len(set(rows)), "a kind has two rows")
        kinds = journal_kinds()
        self.assertEqual(sorted(kinds - set(rows)), [], "kinds without a row")
        self.assertEqual(sorted(set(rows) - kinds), [], "rows for kinds dtd never writes")

    def test_every_unit_the_documents_name_is_one_the_project_installs(self):
        named = {}
        for doc in [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]:
            for unit in units_named(doc.read_text()):
                named.setdefault(unit, doc.relative_to(ROOT).as_posix())
        self.assertIn("dtd", named, "no document names dtd's unit: did the pattern break?")
        installed = installed_units()
        unknown = {u: d for u, d in named.items() if u not in installed}
        self.assertEqual(unknown, {}, "units no template installs (the unit is `dtd` on every node)")

    def test_the_unit_pattern_reads_what_people_type(self):
        text = "`journalctl -u dtd-agent` and `journalctl -b -u dtd -f`, `systemctl edit dtd.service`"
        self.assertEqual(units_named(text), {"dtd-agent", "dtd"})

    def test_every_link_resolves(self):
        run = subprocess.run([sys.executable, str(ROOT / "scripts/check-links")],
                             capture_output=True, text=True)
        self.assertEqual(run.returncode, 0, run.stdout + run.stderr)

    def test_the_link_checker_finds_a_broken_link_and_a_missing_heading(self):
        mod = self.checker()
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "docs").mkdir()
            (root / "README.md").write_text(
                "# Top\n\n## A `b` c: d\n\n[ok](#a-b-c-d) [x](docs/a.md#nope) [y](missing.md)\n"
                "```\n[inside a fence](nowhere.md)\n```\n")
            (root / "docs/a.md").write_text("# A\n\n[back](../README.md#top)\n")
            mod.ROOT = root
            broken = mod.check()
        self.assertEqual(len(broken), 2, broken)
        self.assertIn("docs/a.md#nope: no such heading", broken[0])
        self.assertIn("missing.md: no such file", broken[1])

    def test_the_link_checker_reads_a_link_whose_text_runs_over_lines(self):
        mod = self.checker()
        with tempfile.TemporaryDirectory() as tmp:
            root = Path(tmp)
            (root / "docs").mkdir()
            (root / "README.md").write_text(
                "# Top\n\nSee [the\nprograms it runs](#nope) and [over\nlines](#top).\n\n"
                "[not a link\n\nacross paragraphs](#nowhere)\n")
            mod.ROOT = root
            broken = mod.check()
        self.assertEqual(broken, ["README.md:4: #nope: no such heading"])

    @staticmethod
    def checker():
        import importlib.machinery, importlib.util
        loader = importlib.machinery.SourceFileLoader("check_links", str(ROOT / "scripts/check-links"))
        spec = importlib.util.spec_from_loader("check_links", loader)
        mod = importlib.util.module_from_spec(spec)
        loader.exec_module(mod)
        return mod


if __name__ == "__main__":
    unittest.main()
