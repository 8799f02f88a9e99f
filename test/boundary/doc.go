// Package boundary enforces the module dependency rule: the discovery and proxy modules never
// depend, even transitively, on a Kubernetes client or on the operator's root module. A proxy
// holding no Kubernetes client is a security property, so the build checks it.
package boundary
