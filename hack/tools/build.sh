#!/usr/bin/env bash
# Builds the pinned programs the integration tests run, from the Go modules
# pinned in this folder: kube-apiserver and etcd (every integration test),
# and for the node tests the kubelet, kube-controller-manager and
# kube-scheduler (this folder's module, the same k8s.io/kubernetes as the API
# server), containerd with its runc shim and ctr (node/), and the CNI plugins
# of the pod network (cni/), promtool, which unit-tests the charts' alert
# rules, and the Prometheus server that fires them from real scrapes
# (prometheus/), the CNCF distribution registry the publishing test pushes
# to (registry/), cosign, with which that test makes the signing key and
# checks the signatures (cosign/), and cert-manager's controller with its
# CRDs for the test of the cert-manager recipe (certmanager/). Nothing is downloaded but Go
# modules; the OCI runtime, runc, comes from Debian (see node_packages
# below).
#
# Idempotent: each group is rebuilt only when its module, its build steps or
# the Go version change. A cold build takes several minutes on 2 cores per group;
# the Go build cache makes later rebuilds (for example in a fresh clone) a
# matter of linking.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
root="$(cd "$here/../.." && pwd)"
out="${GRIDSYNC_TOOLS_DIR:-$root/.tools}/bin"
mkdir -p "$out"

# One build at a time in a tools folder: two (two make tools, or make
# test beside make demo) would write the same temporary files and stamps.
exec 9>"$out/.lock"
if ! flock -n 9; then
	echo "tools: another build of the tools in $out is running; waiting for it"
	flock 9
fi

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

# group runs "build_$1" in module folder $2 unless the stamp says its
# binaries ($3...) were built from the same module and Go files of that
# folder (cert-manager's group builds a main of ours from there), the same
# build steps (its own function and the helpers it calls, as bash prints
# them: an edit elsewhere in this script rebuilds nothing) and the same Go.
group() {
	local name="$1" dir="$2" key bin fresh=1
	shift 2
	key="$( { cat "$dir/go.mod" "$dir/go.sum"; find "$dir" -maxdepth 1 -name '*.go' -print0 | sort -z | xargs -0r cat; declare -f build progress "build_$name"; go env GOVERSION; } | sha256sum | cut -d' ' -f1)"
	for bin in "$@"; do
		[[ -x "$out/$bin" ]] || fresh=0
	done
	if [[ $fresh == 1 && -f "$out/.stamp-$name" && "$(cat "$out/.stamp-$name")" == "$key" ]]; then
		echo "tools: $* up to date in $out"
		return
	fi
	rm -f "$out/.stamp-$name"
	(cd "$dir" && echo "tools: downloading the modules of $name" && go mod download && "build_$name")
	echo "$key" > "$out/.stamp-$name"
}

build_kubernetes() {
	local kube_version minor stamp
	kube_version="$(go list -m -f '{{.Version}}' k8s.io/kubernetes)"
	minor="${kube_version#v1.}"
	minor="${minor%%.*}"
	# The version variables are what the Kubernetes release build stamps in;
	# an unstamped binary reports v0.0.0-master, and a kubelet of that
	# version is refused by nothing but confuses everyone reading its node.
	stamp="-X k8s.io/component-base/version.gitVersion=$kube_version \
-X k8s.io/component-base/version.gitMajor=1 \
-X k8s.io/component-base/version.gitMinor=$minor \
-X k8s.io/component-base/version.gitTreeState=clean"
	build etcd go.etcd.io/etcd/server/v3 ""
	build kube-apiserver k8s.io/kubernetes/cmd/kube-apiserver "$stamp"
	build kubelet k8s.io/kubernetes/cmd/kubelet "$stamp"
	build kube-controller-manager k8s.io/kubernetes/cmd/kube-controller-manager "$stamp"
	build kube-scheduler k8s.io/kubernetes/cmd/kube-scheduler "$stamp"
	"$out/kube-apiserver" --version
	# sed reads all of it: head would close the pipe while etcd still
	# writes, and pipefail would turn that SIGPIPE into a failure.
	"$out/etcd" --version | sed -n 1p
}

build_containerd() {
	local version stamp
	export CGO_ENABLED=0
	version="$(go list -m -f '{{.Version}}' github.com/containerd/containerd/v2)"
	stamp="-X github.com/containerd/containerd/v2/version.Version=$version"
	# Static binaries: without cgo the btrfs snapshotter (which needs its C
	# headers) drops out, which the node, using overlayfs, does not miss.
	build containerd github.com/containerd/containerd/v2/cmd/containerd "$stamp"
	build containerd-shim-runc-v2 github.com/containerd/containerd/v2/cmd/containerd-shim-runc-v2 "$stamp"
	build ctr github.com/containerd/containerd/v2/cmd/ctr "$stamp"
	"$out/containerd" --version
}

build_cni() {
	mkdir -p "$out/cni"
	local plugin
	for plugin in main/bridge ipam/host-local; do
		CGO_ENABLED=0 go build -trimpath -ldflags "-s -w" -o "$out/cni/${plugin#*/}" "github.com/containernetworking/plugins/plugins/$plugin"
	done
	echo "tools: built the CNI plugins bridge and host-local"
}

build_prometheus() {
	# remove_all_sd leaves out Prometheus's service discovery plugins (the
	# cloud SDKs): rule tests discover nothing, and the build is minutes
	# shorter.
	local version
	version="$(go list -m -f '{{.Version}}' github.com/prometheus/prometheus)"
	go build -tags remove_all_sd -trimpath -ldflags "-s -w -X github.com/prometheus/common/version.Version=$version" -o "$out/promtool.tmp" github.com/prometheus/prometheus/cmd/promtool
	mv "$out/promtool.tmp" "$out/promtool"
	"$out/promtool" --version | sed -n 1p
	# The server, for the monitoring test that scrapes a grid's pods by
	# static targets: no service discovery either, and without the
	# builtinassets tag no web UI is embedded (its API is all a test asks).
	GOFLAGS="$(go env GOFLAGS) -tags=remove_all_sd" build prometheus github.com/prometheus/prometheus/cmd/prometheus "-X github.com/prometheus/common/version.Version=$version"
	"$out/prometheus" --version | sed -n 1p
}

build_registry() {
	# The CNCF distribution registry the release tests publish to (make
	# publish), stamped with its version: unstamped it says +unknown.
	local version
	version="$(go list -m -f '{{.Version}}' github.com/distribution/distribution/v3)"
	CGO_ENABLED=0 build registry github.com/distribution/distribution/v3/cmd/registry "-X github.com/distribution/distribution/v3/version.version=$version"
	"$out/registry" --version
}

build_cosign() {
	# cosign, stamped with its version as its release build stamps it
	# (unstamped it says devel). Without cgo, as cosign's releases are: no
	# PIV or PKCS #11 keys, which the tests do not use.
	local version
	version="$(go list -m -f '{{.Version}}' github.com/sigstore/cosign/v2)"
	CGO_ENABLED=0 build cosign github.com/sigstore/cosign/v2/cmd/cosign "-X sigs.k8s.io/release-utils/version.gitVersion=$version"
	"$out/cosign" version | sed -n '/GitVersion/p'
}

build_certmanager() {
	# cert-manager's controllers, run by main.go in this module folder (the
	# module proxy cannot serve cert-manager's own controller main, see
	# there), stamped with the pinned version as cert-manager's build
	# stamps it; and its CRDs from the same module version, which the test
	# of the cert-manager recipe installs.
	local version dir
	version="$(go list -m -f '{{.Version}}' github.com/cert-manager/cert-manager)"
	dir="$(go list -m -f '{{.Dir}}' github.com/cert-manager/cert-manager)"
	CGO_ENABLED=0 build cert-manager-controller . "-X github.com/cert-manager/cert-manager/pkg/util.AppVersion=$version"
	rm -rf "$out/cert-manager-crds"
	mkdir -p "$out/cert-manager-crds"
	cp "$dir"/deploy/crds/*.yaml "$out/cert-manager-crds/"
	chmod u+w "$out"/cert-manager-crds/*.yaml
	echo "tools: cert-manager-controller $("$out/cert-manager-controller" --version), its CRDs in $out/cert-manager-crds"
}

# node_packages says what the node tests need from the machine beyond Go
# modules: runc (the OCI runtime containerd's shim runs containers with),
# ip (iproute2, for the node's network namespace and the WAN lab's sites),
# nsenter (util-linux, to start the kubelet and containerd inside it) and
# nft (nftables: the WAN lab's load balancer addresses and sites that
# cannot be dialled, test/testwan). They come from Debian,
# installed here when one is missing and this is a Debian machine run as
# root, as CI is.
node_packages() {
	local missing=() cmd pkg
	for cmd in runc:runc ip:iproute2 nsenter:util-linux nft:nftables; do
		command -v "${cmd%%:*}" >/dev/null || missing+=("${cmd#*:}")
	done
	[[ ${#missing[@]} == 0 ]] && return
	if [[ $(id -u) == 0 ]] && command -v apt-get >/dev/null; then
		echo "tools: installing ${missing[*]} from Debian (for the node and WAN tests)"
		DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null ||
			{ apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null; }
		return
	fi
	echo "tools: the node and WAN tests need the Debian packages ${missing[*]} (apt-get install ${missing[*]})" >&2
}

group kubernetes "$here" etcd kube-apiserver kubelet kube-controller-manager kube-scheduler
group containerd "$here/node" containerd containerd-shim-runc-v2 ctr
group cni "$here/cni" cni/bridge cni/host-local
group prometheus "$here/prometheus" promtool prometheus
group registry "$here/registry" registry
group cosign "$here/cosign" cosign
group certmanager "$here/certmanager" cert-manager-controller cert-manager-crds
node_packages
echo "tools: ready in $out"
