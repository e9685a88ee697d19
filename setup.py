"""Build hook: a wheel carries the repository's templates/ and config/ folders inside
the package, as bot/shipped_files/, so an installed digestbot works from any folder
(``bot.shipped`` finds them there, or in the checkout for an editable install)."""

import shutil
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

SHIPPED = ("templates", "config")


class BuildWithShippedFiles(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:  # an editable install reads the checkout's own folders
            return
        for name in SHIPPED:
            target = Path(self.build_lib, "bot", "shipped_files", name)
            shutil.rmtree(target, ignore_errors=True)
            shutil.copytree(name, target, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


setup(cmdclass={"build_py": BuildWithShippedFiles})
