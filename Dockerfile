# mesh-cni: the plugin and its API-lookup helper, the node agent, the metrics
# proxy and the validator,
# all static, in one image with nothing else. Build the binaries first (make build), then
#   DOCKER_BUILDKIT=0 docker build -t mesh-cni:$(cat VERSION) .
# (make image does both.)
FROM scratch
# mesh-cnictl is optional; the bracket glob lets COPY skip it when absent.
COPY bin/mesh-cni bin/mesh-cni-podget bin/mesh-cni-agent bin/mesh-cni-metrics-proxy bin/mesh-cni-validator bin/mesh-cnict[l] /
USER 0:0
ENTRYPOINT ["/mesh-cni-agent"]
