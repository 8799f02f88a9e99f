# The operator: a static binary on distroless, running as the numeric nonroot user (so
# runAsNonRoot can verify it). `make release` builds the same image without Docker
# (hack/release): the same user, entrypoint, working directory and labels.
FROM golang:1.27 AS build
ARG VERSION=dev
ARG REVISION=unknown
ARG PROXY_REPOSITORY=coxswain.dev/coxswain-proxy
WORKDIR /src
COPY go.mod go.sum ./
COPY discovery/go.mod discovery/go.sum discovery/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -buildvcs=false -ldflags="-s -w -buildid= \
	-X coxswain.dev/coxswain/discovery/buildinfo.Version=${VERSION} \
	-X coxswain.dev/coxswain/discovery/buildinfo.Revision=${REVISION} \
	-X coxswain.dev/coxswain/discovery/buildinfo.ProxyRepository=${PROXY_REPOSITORY}" -o /out/coxswain .

FROM gcr.io/distroless/static:nonroot
ARG VERSION=dev
ARG REVISION=unknown
LABEL org.opencontainers.image.title="coxswain" \
	org.opencontainers.image.description="Coxswain operator: Gateway API controller and discovery server" \
	org.opencontainers.image.version="${VERSION}" \
	org.opencontainers.image.revision="${REVISION}" \
	org.opencontainers.image.vendor="Coxswain" \
	org.opencontainers.image.url="https://coxswain.dev"
COPY --from=build /out/coxswain /coxswain
USER 65532:65532
WORKDIR /home/nonroot
ENTRYPOINT ["/coxswain"]
