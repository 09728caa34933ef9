"""Shared by the Spark tests (a module name no other test folder uses)."""

from __future__ import annotations

from typing import Any


class DeadSession:
    """What a SparkSession looks like once its JVM is gone: every call into it fails."""

    def newSession(self) -> DeadSession:
        return self

    @property
    def conf(self) -> Any:
        return self

    def set(self, *_: Any) -> None:
        pass

    @property
    def sparkContext(self) -> Any:
        raise ConnectionError("Py4JNetworkError: answer from Java side is empty")
