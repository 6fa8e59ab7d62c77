"""Shared harness of the Python conformance scripts.

Each script runs its steps in order and keeps going after a failure, so one
run lists every gap. A failed step prints the last HTTP exchange the client
made (method, URL, request body, status, response body): that is what a
Sluice change has to fix. The exit status is 1 when any step failed.
"""

import json
import os
import sys
import traceback

import requests

_last = {}


def _record(response, *args, **kwargs):
    _last["response"] = response


_session_init = requests.Session.__init__


def _init(self, *args, **kwargs):
    _session_init(self, *args, **kwargs)
    self.hooks["response"].append(_record)


# Every client builds its own session: record their exchanges all the same.
requests.Session.__init__ = _init

ENV = {k: os.environ[k] for k in os.environ if k.startswith(("SLUICE_", "SEED_"))}
failures = []


def env(name):
    return ENV[name]


def _exchange():
    r = _last.get("response")
    if r is None:
        return "  (no HTTP exchange)"
    req = r.request
    body = req.body
    if isinstance(body, bytes):
        body = body.decode("utf-8", "replace")
    text = r.text
    if len(text) > 600:
        text = text[:600] + "..."
    return "  request:  %s %s%s\n  response: %d %s" % (
        req.method, req.url, (" body=" + body) if body else "", r.status_code, text)


def step(name, fn):
    """Run one step; returns its result, or None after recording a failure."""
    _last.clear()
    try:
        result = fn()
    except Exception as e:  # noqa: BLE001 - every failure is a finding
        failures.append(name)
        print("FAIL %s: %s: %s\n%s" % (name, type(e).__name__, e, _exchange()), flush=True)
        if os.environ.get("CONFORM_TRACE"):
            traceback.print_exc()
        return None
    print("ok   %s" % name, flush=True)
    return result


def expect(cond, what, got=None):
    if not cond:
        raise AssertionError("expected %s; got %s" % (what, json.dumps(got, default=str)[:600]))


def finish():
    if failures:
        print("%d step(s) failed: %s" % (len(failures), ", ".join(failures)), flush=True)
        sys.exit(1)
    print("all steps passed", flush=True)
