// Package image gives the node its images in two ways: an image map names the local static
// binary an image stands for (the conformance suite's images, the sample echo server), and a
// Store pulls OCI images from a registry, by digest where the reference pins one, and unpacks
// each once per digest, layers in order with their whiteouts, for containers to run as their
// configuration says (entrypoint, cmd, environment, working directory, user).
package image
