// Package router compiles a validated resource set into an immutable routing table and matches
// requests against it: ports hold virtual hosts (exact hostname before wildcard before catch-all),
// virtual hosts hold routes in the controller's precedence order, matched first-match from
// per-hostname and per-path indexes whose cost does not grow with the number of routes. Update
// derives a table from the serving one, compiling only what changed and sharing the rest; the
// table knows nothing of the HTTP engine.
package router
