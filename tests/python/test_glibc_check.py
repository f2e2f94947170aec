"""scripts/glibc-check decides whether a release starts on the nodes' glibc (2.34 on Amazon Linux
2023). These tests give it binaries compiled here whose needs are known, so a checker that
passes everything (or refuses everything) fails them.

Run from the repository root: python3 -m unittest discover -s tests/python -v
"""
import importlib.machinery
import importlib.util
import shutil
import subprocess
import sys
import tempfile
import unittest
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
CHECK = ROOT / "scripts" / "glibc-check"

# arc4random arrived in glibc 2.36; puts has been there since the first versioned x86_64 glibc.
NEW = "#include <stdio.h>\n#include <stdlib.h>\nint main(void) { printf(\"%u\\n\", arc4random()); return 0; }\n"
OLD = "#include <stdio.h>\nint main(void) { puts(\"hello\"); return 0; }\n"


def check(*args):
    r = subprocess.run([sys.executable, str(CHECK), *map(str, args)], capture_output=True,
                       text=True, timeout=30)
    return r.returncode, r.stdout, r.stderr


class GlibcCheckTest(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.TemporaryDirectory(prefix="dt-glibc-check.")
        cls.dir = Path(cls.tmp.name)
        cc = shutil.which("cc") or shutil.which("gcc")
        if cc is None:
            raise AssertionError("no C compiler (cc) on PATH: the Rust toolchain needs one to link")

        def build(name, source, *flags):
            (cls.dir / f"{name}.c").write_text(source)
            r = subprocess.run([cc, *flags, "-o", str(cls.dir / name), str(cls.dir / f"{name}.c")],
                               capture_output=True, text=True, timeout=60)
            if r.returncode != 0:
                raise AssertionError(f"cc could not build {name} (the test needs glibc 2.36 or "
                                     f"newer and its headers, libc6-dev):\n{r.stderr}")
            return cls.dir / name

        cls.new = build("needs_2_36", NEW)
        cls.old = build("needs_old", OLD)
        cls.static = build("static", OLD, "-static")

    @classmethod
    def tearDownClass(cls):
        cls.tmp.cleanup()

    def test_a_binary_needing_a_newer_glibc_is_refused_naming_symbol_and_version(self):
        code, out, err = check("--max", "2.34", self.new)
        self.assertEqual(code, 1, out + err)
        self.assertIn("GLIBC_2.36", err)
        self.assertIn("arc4random", err)
        self.assertIn("2.34", err)

    def test_the_same_binary_passes_when_its_glibc_is_allowed(self):
        code, out, err = check("--max", "2.36", self.new)
        self.assertEqual(code, 0, out + err)
        self.assertIn("highest GLIBC_2.36 (symbol arc4random)", out)

    def test_the_limit_compares_versions_as_numbers(self):
        # As strings "2.4" > "2.36"; as versions it is older.
        code, out, err = check("--max", "2.4", self.new)
        self.assertEqual(code, 1, out + err)

    def test_a_binary_needing_an_older_glibc_passes(self):
        code, out, err = check("--max", "2.34", self.old)
        self.assertEqual(code, 0, out + err)
        self.assertEqual(err, "")
        self.assertIn("highest GLIBC_2.", out)
        self.assertNotIn("arc4random", out)

    def test_one_bad_binary_among_good_ones_fails_the_lot(self):
        code, out, err = check("--max", "2.34", self.old, self.new)
        self.assertEqual(code, 1, out + err)
        self.assertIn(str(self.old), out)
        self.assertIn(str(self.new), err)

    def test_a_static_binary_needs_no_glibc_version(self):
        code, out, err = check("--max", "2.17", self.static)
        self.assertEqual(code, 0, out + err)
        self.assertIn("needs no GLIBC version", out)

    def test_a_file_that_is_not_elf_is_an_error_not_a_pass(self):
        code, out, err = check("--max", "2.34", self.dir / "needs_old.c")
        self.assertEqual(code, 2, out + err)
        self.assertIn("not an ELF file", err)
        code, _, err = check("--max", "2.34", self.dir / "missing")
        self.assertEqual(code, 2, err)

    @unittest.skipUnless(shutil.which("objdump"), "binutils' objdump is not installed")
    def test_the_versions_found_agree_with_objdump(self):
        # The script has no .py suffix: load it by path.
        loader = importlib.machinery.SourceFileLoader("glibc_check", str(CHECK))
        module = importlib.util.module_from_spec(importlib.util.spec_from_loader(loader.name, loader))
        loader.exec_module(module)
        for binary in (self.new, self.old):
            dump = subprocess.run(["objdump", "-T", str(binary)], capture_output=True, text=True,
                                  check=True).stdout
            # (GLIBC_2.36) arc4random -> version 2.36 needs symbol arc4random.
            expected = {}
            for line in dump.splitlines():
                words = line.split()
                if len(words) >= 2 and words[-2].startswith("(GLIBC_") and "*UND*" in line:
                    version = tuple(int(p) for p in words[-2][7:-1].split("."))
                    expected.setdefault(version, []).append(words[-1])
            found = module.glibc_needs(binary.read_bytes())
            self.assertEqual({v: sorted(n) for v, n in expected.items()}, found)


if __name__ == "__main__":
    unittest.main()
