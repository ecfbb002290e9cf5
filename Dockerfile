# syntax=docker/dockerfile:1
# The poppyhost image: /server (the entrypoint) and /migrate, static
# binaries on a distroless base that has CA certificates and no shell.
#
#   docker build -t poppyhost/poppyhost:0.1.0 .
#
# The Helm chart (deploy/helm/poppyhost) runs /server in the Deployment
# and `/migrate up` in its pre-install/pre-upgrade hook Job.

FROM golang:1.26 AS build
WORKDIR /src
ENV CGO_ENABLED=0 GOFLAGS=-buildvcs=false
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN go build -trimpath -ldflags="-s -w" -o /out/server ./cmd/server \
 && go build -trimpath -ldflags="-s -w" -o /out/migrate ./cmd/migrate

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/server /out/migrate /
# nonroot (65532), given as numbers so Kubernetes' runAsNonRoot can check it.
USER 65532:65532
# 8443: the public listener; 9090: health, readiness and metrics (POPPYHOST_OPS_ADDR).
EXPOSE 8443 9090
ENTRYPOINT ["/server"]
