"""Entry point: `python -m services.gateway` (see runtime/entry.py for the common environment).

The Gateway API control plane, in a cluster only: each running ModelDeployment's InferencePool, endpoint
picker and HTTPRoute, its member of Jetway's router, `GatewayReady` and `status.gateway`, and each Gateway's
cross-namespace admission. Its settings (the Gateway to use, the endpoint picker's image): docs/settings.md.
"""

from __future__ import annotations

from runtime.entry import Context, Declared
from runtime.service import Runnable
from services.gateway.decide import DEFAULT_EPP_IMAGE
from services.gateway.handlers import GatewayService

NAME = "gateway"


async def start(context: Context) -> list[Runnable]:
    kube = context.kube
    if kube is None:
        raise SystemExit("gateway: the Gateway API control plane runs in a cluster only (JETWAY_MODE=cluster)")
    return [
        context.scaled(
            NAME,
            lambda: GatewayService(
                kube,
                configured_gateway=context.settings.gateway.gateway,
                epp_image=context.settings.gateway.epp_image or DEFAULT_EPP_IMAGE,
                resync_interval=context.resync_interval,
            ),
        )
    ]


SERVICE = Declared(NAME, start)
