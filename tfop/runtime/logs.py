"""The operator's log lines: text for people, JSON lines for log pipelines (`tfop run --log-format`)."""
from __future__ import annotations

import json
import logging
from datetime import UTC, datetime

TEXT_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
# Fields a record may carry (`extra=`), written as JSON keys: a pipeline filters one job by them.
EXTRA_FIELDS = ("job_namespace", "job_name", "outcome", "duration_ms")


class JsonLines(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        line = {"time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
                "level": record.levelname, "logger": record.name, "message": record.getMessage()}
        for field in EXTRA_FIELDS:
            if hasattr(record, field):
                line[field] = getattr(record, field)
        if record.exc_info:
            line["exception"] = self.formatException(record.exc_info)
        return json.dumps(line, default=str)


def configure(log_format: str, verbose: bool) -> None:
    handler = logging.StreamHandler()
    handler.setFormatter(JsonLines() if log_format == "json" else logging.Formatter(TEXT_FORMAT))
    # Like logging.basicConfig: a root logger that has handlers already (a test's) is left alone.
    logging.basicConfig(level=logging.DEBUG if verbose else logging.INFO, handlers=[handler])
    if not verbose:
        logging.getLogger("kopf").setLevel(logging.WARNING)
