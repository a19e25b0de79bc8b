"""Probing one member: echo is always ready; HTTP members answer GET {url}/v1/models, and their GET /metrics
is read for the load they report (services/router/load.py); operator-signal members answer through their
compute agent. Secrets are read on every probe, in a worker thread (a file read never blocks the router's
loop), so a rotated secret is used from the next tick on; requests use what the last probe read."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

import msgspec

from contracts.subjects import Key
from runtime.secrets import SecretSource, bearer_token
from services.router import load as loads
from services.router.decide import ProbeOutcome
from services.router.projection import Member
from services.router.signal import NoAgent, SignalClient
from services.router.upstream import DialRefused, Endpoint, TooLarge, UpstreamError, UpstreamPool

PROBE_TIMEOUT = 3.0
MAX_MODELS_BODY = 4 * 1024 * 1024  # a model list is kilobytes; an endless one is read this far, then dropped
MAX_METRICS_BODY = 8 * 1024 * 1024  # an engine's /metrics is 50-200 KiB


class _Models(msgspec.Struct):
    data: list[dict[str, object]]


def advertised(body: bytes) -> tuple[str, ...] | None:
    """Model ids of an OpenAI /v1/models answer, None when it is not one."""
    try:
        models = msgspec.json.decode(body, type=_Models)
    except (msgspec.DecodeError, msgspec.ValidationError):
        return None
    return tuple(str(m["id"]) for m in models.data if isinstance(m.get("id"), str))


def _headers(accept: bytes, token: str) -> list[tuple[bytes, bytes]]:
    headers = [(b"accept", accept)]
    if token:
        headers.append((b"authorization", b"Bearer " + token.encode()))
    return headers


@dataclass
class Prober:
    pool: UpstreamPool
    secrets: SecretSource
    signal: SignalClient | None = None
    timeout: float = PROBE_TIMEOUT
    resolved: dict[Key, tuple[Endpoint, str]] = field(default_factory=dict)  # what the router dials, per member

    def credentials(self, key: Key) -> tuple[Endpoint, str] | None:
        return self.resolved.get(key)

    def forget(self, key: Key) -> None:
        self.resolved.pop(key, None)

    async def _read_secret(self, name: str, field_name: str) -> bytes | ProbeOutcome:
        value = await asyncio.to_thread(self.secrets.get, name)
        if value is None:
            return ProbeOutcome(reason="SecretNotFound", message=f"secret {name!r} ({field_name}) not found in the secret store")
        return value

    async def probe(self, member: Member) -> tuple[ProbeOutcome, str]:
        spec = member.spec
        transport = spec.transport or "http-direct"
        if spec.backend == "echo":
            return ProbeOutcome(models=member.declared), transport
        if transport == "operator-signal":
            return await self._probe_agent(spec.computeOperatorRef or ""), transport
        resolved = await self.resolve(member)
        if isinstance(resolved, ProbeOutcome):
            return resolved, transport
        endpoint, token = resolved
        try:
            answer = await self.pool.fetch(
                endpoint, "GET", "/v1/models", _headers(b"application/json", token), timeout=self.timeout, max_body=MAX_MODELS_BODY
            )
        except TooLarge:
            return ProbeOutcome(
                reason="ProbeFailed", message=f"GET /v1/models answered more than {MAX_MODELS_BODY // (1024 * 1024)} MiB"
            ), transport
        except DialRefused as exc:
            return ProbeOutcome(reason="DialRefused", message=str(exc)), transport
        except UpstreamError as exc:
            return ProbeOutcome(reason="Unreachable", message=str(exc)), transport
        except ValueError as exc:  # e.g. a CA bundle that is not PEM
            return ProbeOutcome(reason="ProbeFailed", message=f"cannot use the CA bundle of caFileRef {spec.caFileRef!r}: {exc}"), transport
        outcome = self._judge(answer.status, answer.content)
        if outcome.models is not None:
            outcome = ProbeOutcome(models=outcome.models, load=await self.load(member))
        return outcome, transport

    async def resolve(self, member: Member) -> tuple[Endpoint, str] | ProbeOutcome:
        """What the router dials for an http-direct member: its endpoint and the bearer token its secret holds now,
        kept for requests (`credentials`); or why not. A router replica resolves every member, also those whose
        health another replica probes and records, since it routes to all of them."""
        spec = member.spec
        token = ""
        if spec.authSecretRef:
            value = await self._read_secret(spec.authSecretRef, "authSecretRef")
            if isinstance(value, ProbeOutcome):
                return value
            token = bearer_token(value)
        bundle = None
        if spec.caFileRef:
            value = await self._read_secret(spec.caFileRef, "caFileRef")
            if isinstance(value, ProbeOutcome):
                return value
            bundle = value
        try:
            endpoint = Endpoint.parse(spec.url, bundle)
        except ValueError as exc:
            return ProbeOutcome(reason="ProbeFailed", message=f"url cannot be dialled: {exc}")
        self.resolved[member.key] = (endpoint, token)
        return endpoint, token

    async def load(self, member: Member) -> loads.Load | None:
        """What the member reports on GET /metrics, with the credentials its last probe resolved; None when it
        cannot tell (no /metrics, an error, no engine gauges): it still routes, by this router's own counts."""
        resolved = self.resolved.get(member.key)
        if resolved is None or member.spec.backend == "echo":
            return None
        endpoint, token = resolved
        try:
            answer = await self.pool.fetch(
                endpoint, "GET", "/metrics", _headers(b"text/plain", token), timeout=self.timeout, max_body=MAX_METRICS_BODY
            )
        except (UpstreamError, ValueError, OSError):
            return None
        if not 200 <= answer.status < 300:
            return None
        return loads.parse(answer.content)

    async def _probe_agent(self, agent: str) -> ProbeOutcome:
        if self.signal is None:
            return ProbeOutcome(reason="ComputeOperatorNotEnrolled", message="operator-signal needs the bus")
        try:
            status, body = await self.signal.probe(agent, self.timeout)
        except NoAgent as exc:
            return ProbeOutcome(reason="ComputeOperatorNotEnrolled", message=str(exc))
        except UpstreamError as exc:
            return ProbeOutcome(reason="Unreachable", message=str(exc))
        return self._judge(status, body)

    @staticmethod
    def _judge(status: int, body: bytes) -> ProbeOutcome:
        if not 200 <= status < 300:
            return ProbeOutcome(reason="ProbeFailed", message=f"GET /v1/models answered {status}")
        models = advertised(body)
        if models is None:
            return ProbeOutcome(reason="ProbeFailed", message="GET /v1/models did not answer an OpenAI model list")
        return ProbeOutcome(models=models)
