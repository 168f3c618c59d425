# The single eppkit image: one static binary (CGO_ENABLED=0) whose subcommand is the container's
# first argument (manifests/k8s: `fake-vllm ...`, `reference-epp ...`).
#   make image                      (IMAGE=eppkit:dev, ENGINE=docker)
# FROM scratch only, so building needs no registry: `make image` compiles the binary on the host
# and stages out/image/rootfs.tar (/eppkit, the CA bundle, a world-writable /tmp), which ADD
# unpacks with its modes (a COPY of a directory would make /tmp 0755), and builds this file with
# out/image/ as the context (docs/kubernetes.md).
FROM scratch
ADD rootfs.tar /
ENV TMPDIR=/tmp
# nobody:nogroup; nothing in the image needs root.
USER 65534:65534
ENTRYPOINT ["/eppkit"]
