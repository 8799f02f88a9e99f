// Package resource holds the routing state a proxy serves: an immutable, complete Set of keyed
// discovery resources at one version. The agent builds a new Set from every full snapshot or
// delta it receives; the data plane reads the Set it applied last and never sees a partial one.
package resource
