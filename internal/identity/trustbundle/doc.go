// Package trustbundle publishes the discovery CA's public roots as the ConfigMap
// coxswain-discovery-trust (key ca.crt) that proxies mount: one in the controller namespace, and
// a copy, owned by the Gateway it serves, in every namespace that runs a dedicated proxy. It
// writes only when the content changed and never overwrites a ConfigMap it does not manage.
package trustbundle
