// Package chart tests the Helm chart charts/coxswain: for every install mode it renders the same
// objects as the kustomize variant of config/ (compared parsed, not as text), it passes helm lint,
// and its values reach the objects they name.
package chart
