# The single eppkit image: one static binary (CGO_ENABLED=0) whose subcommand is the container's
# first argument (manifests/k8s: `fake-vllm ...`, `reference-epp ...`).
#   docker build -t eppkit:dev .        (or: make image)
# The build stage's Go matches go.mod's toolchain line (go 1.26); the runtime stage is scratch,
# which has no tag to move, plus the CA bundle and a world-writable /tmp from the build stage.
# The module download needs the Go module proxy (GOPROXY is passed through as a build arg).
FROM golang:1.26.8 AS build
ARG GOPROXY=https://proxy.golang.org,direct
ARG VERSION=dev
WORKDIR /src
COPY go.mod go.sum ./
RUN --mount=type=cache,target=/root/go/pkg/mod go mod download
COPY . .
RUN --mount=type=cache,target=/root/go/pkg/mod --mount=type=cache,target=/root/.cache/go-build \
    CGO_ENABLED=0 GOOS=linux go build -trimpath -ldflags "-s -w -X main.version=${VERSION}" -o /out/eppkit ./cmd/eppkit \
 && mkdir -p /out/tmp && chmod 1777 /out/tmp

FROM scratch
COPY --from=build /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
COPY --from=build /out/tmp /tmp
COPY --from=build /out/eppkit /eppkit
ENV TMPDIR=/tmp
# nobody:nogroup; nothing in the image needs root.
USER 65534:65534
ENTRYPOINT ["/eppkit"]
