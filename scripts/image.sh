#!/usr/bin/env bash
# `make image`: build the Containerfile with Debian's podman (rootful, vfs storage, chroot
# isolation: no container engine, overlay mount or network namespace needed).
#
#   IMAGE                 the tag (default localhost/slurmtower:latest)
#   SLURM_CLIENT_VERSION  Debian's slurm-client version (default: the one installed here, if any)
#   SLURMTOWER_UID        the service user's uid (default: the Containerfile's)
#   (the version: the git tag on HEAD, if any; else pyproject.toml's fallback)
#   BASE                  the base image (default docker.io/library/debian:bookworm-slim). When
#                         it cannot be pulled (no registry reachable), a Debian 12 base is made
#                         from Debian's mirror with debootstrap: localhost/debian-debootstrap:bookworm
#   STORAGE_DRIVER        podman's storage driver (default vfs)
#   PIP_CA_FILE           a CA bundle pip must trust inside the build (a TLS-inspecting proxy);
#                         default: the host pip's (PIP_CERT, or `cert =` in /etc/pip.conf)
set -euo pipefail
cd "$(dirname "$0")/.."

IMAGE=${IMAGE:-localhost/slurmtower:latest}
BASE=${BASE:-docker.io/library/debian:bookworm-slim}
LOCAL_BASE=localhost/debian-debootstrap:bookworm
MIRROR=${MIRROR:-http://deb.debian.org/debian}
SLURM_CLIENT_VERSION=${SLURM_CLIENT_VERSION:-$(dpkg-query -W -f '${Version}' slurm-client 2>/dev/null || true)}

need() { command -v "$1" >/dev/null || DEBIAN_FRONTEND=noninteractive apt-get install -y -q "${2:-$1}"; }
need podman
podman=(podman --storage-driver "${STORAGE_DRIVER:-vfs}")

if ! "${podman[@]}" image exists "$BASE" && ! "${podman[@]}" pull -q "$BASE"; then
  echo "image.sh: $BASE cannot be pulled; using a Debian 12 base made with debootstrap from $MIRROR" >&2
  BASE=$LOCAL_BASE
  if ! "${podman[@]}" image exists "$BASE"; then
    need debootstrap
    root=$(mktemp -d /var/tmp/slurmtower-debootstrap.XXXXXX)
    chmod 0755 "$root"  # the image's / (mktemp's 0700 keeps every non-root user out of it)
    trap 'rm -rf "$root"' EXIT
    debootstrap --variant=minbase bookworm "$root" "$MIRROR"
    # The sources of Debian's own bookworm image (slurm-client's fixes come from -security).
    rm -f "$root/etc/apt/sources.list"
    cat >"$root/etc/apt/sources.list.d/debian.sources" <<EOF
Types: deb
URIs: $MIRROR
Suites: bookworm bookworm-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: bookworm-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    rm -rf "$root"/var/cache/apt/archives/*.deb "$root"/var/lib/apt/lists/*
    tar -C "$root" -c . | "${podman[@]}" import \
      --change 'ENV=PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
      --change 'CMD=["/bin/bash"]' - "$BASE"
    rm -rf "$root"
    trap - EXIT
  fi
fi

args=(--build-arg "BASE=$BASE")
[ -n "$SLURM_CLIENT_VERSION" ] && args+=(--build-arg "SLURM_CLIENT_VERSION=$SLURM_CLIENT_VERSION")
[ -n "${SLURMTOWER_UID:-}" ] && args+=(--build-arg "SLURMTOWER_UID=$SLURMTOWER_UID")
ca=${PIP_CA_FILE:-${PIP_CERT:-$(sed -n 's/^ *cert *= *//p' /etc/pip.conf 2>/dev/null | head -1)}}
if [ -n "$ca" ] && [ -f "$ca" ]; then
  args+=(--volume "$ca:/run/pip-ca.crt:ro" --build-arg PIP_CA=/run/pip-ca.crt)
fi
tag=$(git describe --tags --exact-match --match 'v[0-9]*' 2>/dev/null || true)
[ -n "$tag" ] && args+=(--build-arg "SLURMTOWER_VERSION=${tag#v}")
"${podman[@]}" build --isolation chroot --pull=never -f Containerfile "${args[@]}" -t "$IMAGE" .
echo "image.sh: built $IMAGE (base $BASE, slurm-client ${SLURM_CLIENT_VERSION:-as the Containerfile says})"
