// Package controllers holds the operator's reconcilers: thin adapters, one file per kind, that
// read the cache, call the pure logic under internal/, and write status only when it changed.
package controllers
