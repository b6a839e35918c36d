# wstream images (docs/docker.md). One image serves every role: its
# entrypoint is wstream, so the command picks it:
#
#   docker build -t wstream .
#   docker run -p 4222:4222 -v wstream-server:/data wstream server --listen 0.0.0.0:4222
#   docker run -v wstream-w1:/data wstream worker --nats nats://SERVER:4222 --id w1
#
# Ports: 4222, the NATS server that `wstream server` embeds (--listen); workers
# and deploy clients connect to it. Volume: /data, the data directory
# (WSTREAM_DATA): job records and checkpoints on a server, subtask state and
# the compiled-module cache on a worker.

# ---- build: the same go build as `make build`, into a static binary.
FROM golang:1.26-bookworm AS build
WORKDIR /src
# Modules first, so that a source change does not download them again.
COPY go.mod go.sum ./
RUN go mod download
COPY . .
# CGO_ENABLED=0: nothing in wstream needs cgo, and the runtime image has no libc.
ENV CGO_ENABLED=0
RUN go build -buildvcs=auto -o /out/wstream ./cmd/wstream
RUN mkdir -p /out/data

# ---- runtime: the binary alone, run as an unprivileged user.
FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/wstream /usr/local/bin/wstream
# A named volume mounted here starts out owned by the nonroot user.
COPY --from=build --chown=65532:65532 /out/data /data
ENV WSTREAM_DATA=/data
VOLUME /data
EXPOSE 4222
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/wstream"]
CMD ["--help"]
