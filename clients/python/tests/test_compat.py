"""The package as released: Python 3.9 syntax, typed (py.typed), standard library only."""

from __future__ import annotations

import ast
import os
import sys
import unittest

import servegate

PACKAGE = os.path.dirname(os.path.abspath(servegate.__file__))
SOURCES = sorted(os.path.join(PACKAGE, f) for f in os.listdir(PACKAGE) if f.endswith(".py"))


class CompatTests(unittest.TestCase):
    def test_every_module_parses_as_python_3_9(self) -> None:
        self.assertGreater(len(SOURCES), 3)
        for path in SOURCES:
            with self.subTest(os.path.basename(path)), open(path, encoding="utf-8") as fh:
                ast.parse(fh.read(), path, feature_version=(3, 9))

    def test_only_the_standard_library_is_imported(self) -> None:
        # What the package uses; on 3.10+ also checked against the interpreter's own list of standard modules.
        allowed = {
            "__future__", "email", "http", "json", "math", "re", "socket", "ssl", "threading", "time", "typing", "urllib"
        }
        stdlib = getattr(sys, "stdlib_module_names", allowed) | {"__future__"}
        for path in SOURCES:
            with open(path, encoding="utf-8") as fh:
                tree = ast.parse(fh.read())
            for node in ast.walk(tree):
                names = []
                if isinstance(node, ast.Import):
                    names = [a.name for a in node.names]
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names = [node.module]
                for name in names:
                    with self.subTest(f"{os.path.basename(path)}: {name}"):
                        self.assertIn(name.split(".")[0], allowed & stdlib)

    def test_typed(self) -> None:
        self.assertTrue(os.path.isfile(os.path.join(PACKAGE, "py.typed")))

    def test_public_names(self) -> None:
        self.assertEqual(
            sorted(servegate.__all__),
            ["DEFAULT_TIMEOUT", "Deployment", "GatewayError", "MODEL_SERVERS", "Response", "__version__"],
        )
        self.assertRegex(servegate.__version__, r"^\d+\.\d+\.\d+")
