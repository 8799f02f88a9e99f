// Package install checks the manifests `make deploy` applies against a real API server: every
// overlay passes a server-side dry-run apply, and the RBAC they grant is what the operator and its
// proxies need and nothing more.
package install
