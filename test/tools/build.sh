#!/usr/bin/env bash
# Builds the pinned kube-apiserver and etcd that the integration tests run
# against, from the Go modules pinned in this folder's go.mod. Nothing is
# downloaded but Go modules.
#
# Idempotent: the binaries are rebuilt only when go.mod, go.sum, this script
# or the Go version change. A cold build takes several minutes on 2 cores;
# the Go build cache makes later rebuilds (for example in a fresh clone) a
# matter of linking.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${GRIDSYNC_TOOLS_DIR:-$root/.tools}/bin"
cd "$here"

kube_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
etcd_version="$(go list -m -f '{{.Version}}' go.etcd.io/etcd/server/v3)"
key="$( { cat go.mod go.sum build.sh; go env GOVERSION; } | sha256sum | cut -d' ' -f1)"

if [[ -x "$out/kube-apiserver" && -x "$out/etcd" && -f "$out/.stamp" && "$(cat "$out/.stamp")" == "$key" ]]; then
	echo "tools: kube-apiserver $kube_version and etcd $etcd_version are up to date in $out"
	exit 0
fi

mkdir -p "$out"
rm -f "$out/.stamp"

# progress prints a line every 100 compiled packages (go build -v names each
# one) and passes anything that is not a package path, such as errors.
progress() {
	awk -v what="$1" '
		/^[a-zA-Z0-9_.\-]+(\/[a-zA-Z0-9_.\-~]+)*$/ { n++; if (n % 100 == 0) { printf "tools:   %s: %d packages compiled\n", what, n; fflush() } next }
		{ print; fflush() }
		END { printf "tools:   %s: %d packages compiled in total\n", what, n }'
}

build() {
	local what="$1" pkg="$2" ldflags="$3" start
	start=$(date +%s)
	echo "tools: building $what (a cold build takes several minutes; cached builds only link)"
	go build -v -trimpath -ldflags "-s -w $ldflags" -o "$out/$what.tmp" "$pkg" 2>&1 | progress "$what"
	mv "$out/$what.tmp" "$out/$what"
	echo "tools: built $what in $(( $(date +%s) - start ))s"
}

echo "tools: downloading pinned modules (k8s.io/kubernetes $kube_version, etcd $etcd_version)"
go mod download

minor="${kube_version#v1.}"
minor="${minor%%.*}"
build etcd go.etcd.io/etcd/server/v3 ""
# The version variables are what the Kubernetes release build stamps in; an
# unstamped kube-apiserver reports v0.0.0-master.
build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "\
-X k8s.io/component-base/version.gitVersion=$kube_version \
-X k8s.io/component-base/version.gitMajor=1 \
-X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/component-base/version.gitTreeState=clean"

echo "$key" > "$out/.stamp"
"$out/kube-apiserver" --version
# sed reads all of it: head would close the pipe while etcd still writes,
# and pipefail would turn that SIGPIPE into a failure.
"$out/etcd" --version | sed -n 1p
echo "tools: ready in $out"
