"""Schemathesis hooks for Deskbell: every generated request carries the
credentials its door needs, so the fuzzer reaches the handlers behind the guards
(SPEC §4, §15). The tokens come from scripts/schemathesis."""

import os

import schemathesis

VISITOR = os.environ["DESKBELL_VISITOR_TOKEN"]
OPERATOR = os.environ["DESKBELL_OPERATOR_TOKEN"]
ORIGIN = os.environ["DESKBELL_ORIGIN"]


@schemathesis.hook
def before_call(ctx, case, **kwargs):
    if case.headers is None:
        case.headers = {}
    path = case.operation.path
    if path.startswith("/v1/operator/"):
        # Signing out with the token, or revoking it (the stateful phase finds
        # its id in the token list), would end it for the rest of the run: those
        # calls go without credentials and are refused, as documented.
        method = case.method.upper()
        revokes = method == "DELETE"
        signs_in = path == "/v1/operator/session" and method == "POST"
        if not (revokes or signs_in):
            case.headers["Authorization"] = f"Bearer {OPERATOR}"
    elif path.startswith("/v1/"):
        case.headers["Origin"] = ORIGIN
        if path != "/v1/visitors":
            case.headers["Authorization"] = f"Bearer {VISITOR}"
