package image

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
)

// ErrUnknown reports an image the map does not name.
var ErrUnknown = errors.New("image: not in the image map")

// Map holds image name -> absolute path of the binary that stands for it.
type Map map[string]string

// Load reads an image map file: one `IMAGE PATH` pair a line, blank lines and lines starting
// with # ignored. A relative PATH is taken from the file's directory.
func Load(path string) (Map, error) {
	f, err := os.Open(path) //nolint:gosec // the operator names the file
	if err != nil {
		return nil, fmt.Errorf("load image map: %w", err)
	}
	defer f.Close() //nolint:errcheck // read only
	m, err := Parse(f, filepath.Dir(path))
	if err != nil {
		return nil, fmt.Errorf("load image map %s: %w", path, err)
	}
	return m, nil
}

// Parse reads an image map from r, resolving relative paths against dir.
func Parse(r io.Reader, dir string) (Map, error) {
	m := Map{}
	s := bufio.NewScanner(r)
	for n := 1; s.Scan(); n++ {
		line := strings.TrimSpace(s.Text())
		if line == "" || strings.HasPrefix(line, "#") {
			continue
		}
		fields := strings.Fields(line)
		if len(fields) != 2 {
			return nil, fmt.Errorf("line %d: want `IMAGE PATH`, got %q", n, line)
		}
		name, bin := fields[0], fields[1]
		if !filepath.IsAbs(bin) {
			bin = filepath.Join(dir, bin)
		}
		if _, dup := m[name]; dup {
			return nil, fmt.Errorf("line %d: image %s named twice", n, name)
		}
		m[name] = bin
	}
	if err := s.Err(); err != nil {
		return nil, fmt.Errorf("read: %w", err)
	}
	return m, nil
}

// Resolve returns the binary of image. An image without a tag or digest also matches an entry
// tagged :latest, as a container runtime would pull it.
func (m Map) Resolve(image string) (string, error) {
	if bin, ok := m[image]; ok {
		return bin, nil
	}
	if !strings.ContainsAny(lastSegment(image), ":@") {
		if bin, ok := m[image+":latest"]; ok {
			return bin, nil
		}
	}
	return "", fmt.Errorf("%w: %s", ErrUnknown, image)
}

func lastSegment(image string) string {
	if i := strings.LastIndexByte(image, '/'); i >= 0 {
		return image[i+1:]
	}
	return image
}
