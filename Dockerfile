# The operator: a static binary on distroless, running as the numeric nonroot user (so
# runAsNonRoot can verify it).
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
COPY discovery/go.mod discovery/go.sum discovery/
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags="-s -w" -o /out/coxswain .

FROM gcr.io/distroless/static:nonroot
COPY --from=build /out/coxswain /coxswain
USER 65532:65532
ENTRYPOINT ["/coxswain"]
