# The vLLM simulator as an engine image: what a ModelDeployment's `engine.image` names in place of
# vllm/vllm-openai. Jetway renders vLLM's own flags (`--host`, `--port`, `--model`,
# `--served-model-name`, ...) as the container's args; `serve` reads them as `vllm serve` would.
# Built on the Jetway image, which already holds aiohttp and prometheus-client.
ARG JETWAY
FROM ${JETWAY}
COPY vllm_sim.py /sim/vllm_sim.py
ENTRYPOINT ["python", "/sim/vllm_sim.py", "serve"]
