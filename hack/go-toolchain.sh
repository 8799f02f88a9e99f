# The Go toolchain every module of ours builds with, sourced by the scripts that run go and read
# by the Makefile: the one place the version is named. GOTOOLCHAIN in the environment wins over
# the go.mod lines and over a machine's `go env -w GOTOOLCHAIN=local`, and the go command fetches
# this toolchain from the module proxy once. (Upstream builds, hack/k8s-assets.sh and
# hack/coredns-assets.sh, use the machine's own Go: their go.mod lines ask for less.)
export GOTOOLCHAIN=go1.27.3
