"""The Prometheus HTTP API client: instant queries, range queries and series look-ups.

One client for everything that reads a run back from Prometheus: ``dynaweb status``
(infra.status), ``dynaweb report`` (infra.report) and the dashboard/rule checker
(infra.monitoring.check).  Queries are POSTed form-encoded (long PromQL fits).

Errors: ``PrometheusUnavailable`` when Prometheus does not answer (not reachable, or an
HTTP error without an API body); ``PromQueryError`` (a ``ValueError``) when it answers and
rejects the query, with Prometheus' ``errorType`` and ``error``.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.parse
import urllib.request

from core.config import StackConfig


class PrometheusUnavailable(RuntimeError):
    pass


class PromQueryError(ValueError):
    """Prometheus rejected the query (``error_type``, ``error``: its own words)."""

    def __init__(self, error_type: str | None, error: str | None):
        super().__init__(f"Prometheus rejected the query: {error}")
        self.error_type = error_type
        self.error = error


def prometheus_url(stack: StackConfig, url: str | None = None) -> str:
    """The given URL, else the embedded stack's Prometheus (stack.bind:stack.prometheus_port)."""
    return (url or f"http://{stack.bind}:{stack.prometheus_port}").rstrip("/")


class Prom:
    def __init__(self, url: str, timeout: float = 10.0):
        self.url = url.rstrip("/")
        self.timeout = timeout

    def _get(self, path: str, params: dict | list) -> dict:
        body = urllib.parse.urlencode(params).encode()
        req = urllib.request.Request(
            self.url + path,
            data=body,
            headers={"Content-Type": "application/x-www-form-urlencoded"},
        )
        try:
            with urllib.request.urlopen(req, timeout=self.timeout) as r:
                out = json.loads(r.read())
        except urllib.error.HTTPError as e:
            try:
                out = json.loads(e.read())
            except ValueError:
                raise PrometheusUnavailable(f"{self.url}: HTTP {e.code}") from e
        except (urllib.error.URLError, OSError) as e:
            raise PrometheusUnavailable(
                f"Prometheus at {self.url} is not reachable ({e}); "
                "start it with `dynaweb infra up` or pass --prometheus URL"
            ) from e
        if out.get("status") != "success":
            raise PromQueryError(out.get("errorType"), out.get("error"))
        return out["data"]

    def instant(self, expr: str, at: float | None = None) -> dict:
        """``/api/v1/query`` -> its ``data`` object as Prometheus sent it (``resultType``, ``result``)."""
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at:.3f}"
        return self._get("/api/v1/query", params)

    def query(self, expr: str, at: float | None = None) -> list[dict]:
        """The result of an instant query as a vector (a scalar becomes one unlabelled sample)."""
        data = self.instant(expr, at)
        if data["resultType"] == "scalar":
            return [{"metric": {}, "value": data["result"]}]
        return data["result"]

    def value(self, expr: str, at: float | None = None) -> float | None:
        """The single value of an aggregated query (None when empty or NaN)."""
        res = self.query(expr, at)
        if not res:
            return None
        v = float(res[0]["value"][1])
        return None if math.isnan(v) else v

    def by(self, expr: str, label: str, at: float | None = None) -> dict[str, float]:
        out = {}
        for r in self.query(expr, at):
            v = float(r["value"][1])
            if not math.isnan(v):
                out[r["metric"].get(label, "")] = v
        return out

    def range(self, expr: str, start: float, end: float, step: float) -> list[dict]:
        return self._get(
            "/api/v1/query_range",
            {
                "query": expr,
                "start": f"{start:.3f}",
                "end": f"{end:.3f}",
                "step": f"{max(step, 0.001):.3f}",
            },
        )["result"]

    def series(self, match: str, start: float, end: float) -> list[dict]:
        return self._get(
            "/api/v1/series", [("match[]", match), ("start", f"{start:.3f}"), ("end", f"{end:.3f}")]
        )
