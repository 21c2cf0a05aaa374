# gputop export in a container. Build:  docker build -t gputop:0.1.0 .
# Run on a GPU machine with the NVIDIA container toolkit:
#   docker run --rm --gpus all --pid host -p 9835:9835 gputop:0.1.0
# (--gpus all mounts /dev/nvidia* and libnvidia-ml.so.1; --pid host lets gputop read the
# owners and command lines of the GPU's processes.)

# The build: the locked dependencies, release profile, the binary alone kept.
FROM rust:1.95-slim-bookworm AS build
WORKDIR /src
COPY . .
RUN cargo build --release --locked -p gputop \
    && install -m 0755 target/release/gputop /gputop

# The runtime: glibc and nothing else (no shell, no package manager), as the non-root user
# distroless images name nonroot (65532).
FROM gcr.io/distroless/cc-debian12:nonroot
COPY --from=build /gputop /usr/local/bin/gputop
USER 65532:65532
EXPOSE 9835
ENTRYPOINT ["/usr/local/bin/gputop", "export", "--web-listen-address", "0.0.0.0:9835"]
