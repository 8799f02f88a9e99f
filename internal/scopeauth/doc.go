// Package scopeauth answers, for the stream server, which ServiceAccount may subscribe to a
// Gateway's scope. Its Authority is rebuilt from every graph and swapped atomically; when the
// answers change it runs the revocation hooks (the stream server's Reauthorize) and hands the set
// of dedicated proxy identities to whoever keeps the bootstrap allowlist.
package scopeauth
