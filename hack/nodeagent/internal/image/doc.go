// Package image maps container image names to local static binaries: the node agent has no
// image store, so an image is the one binary a file of image names says it stands for.
package image
