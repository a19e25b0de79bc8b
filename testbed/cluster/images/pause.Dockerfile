# The pod sandbox image the node's containerd pins (pause/main.go in testbed/cluster/gomod/nodeparts).
FROM scratch
COPY pause /pause
USER 65535:65535
ENTRYPOINT ["/pause"]
