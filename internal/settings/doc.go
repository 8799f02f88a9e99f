// Package settings resolves the operator's effective configuration. Built-in defaults come
// first, then environment variables, then command-line flags, and a field set in the
// CoxswainConfig wins over all of them. The result is one immutable value the rest of the
// operator reads through a Store.
package settings
