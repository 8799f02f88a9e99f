// Package router compiles a validated resource set into an immutable routing table and matches
// requests against it: ports hold virtual hosts (exact hostname before wildcard before catch-all),
// virtual hosts hold routes in the precedence order the controller compiled, and matching is
// first-match over that order, served from per-hostname and per-path indexes so its cost does
// not grow with the number of routes. The table knows nothing of the HTTP engine.
package router
