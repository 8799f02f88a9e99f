// Package containerlog writes a container's output in the CRI log format (one entry a line:
// `<RFC3339Nano time> <stdout|stderr> <F|P> <content>`, P marking a line split for length) and
// reads it back the way the kubelet serves pods/log: since a time, the last lines, a byte
// limit, with or without timestamps, following a file that is still written.
package containerlog
