package main

import (
	"bufio"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

// The repository's Markdown links to files and headings of other
// Markdown files; a moved file or a renamed heading would leave a link
// that leads nowhere, which nothing else notices.
func TestEveryRelativeLinkOfTheDocsResolves(t *testing.T) {
	root := repoRoot(t)
	var docs []string
	err := filepath.WalkDir(root, func(path string, d os.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && path != root && strings.HasPrefix(d.Name(), ".") {
			return filepath.SkipDir
		}
		if !d.IsDir() && strings.HasSuffix(path, ".md") {
			docs = append(docs, path)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	link := regexp.MustCompile(`(?:^|[^!])\[(?:[^\]\[]|\[[^\]]*\])*\]\(([^)\s]+)\)`)
	scheme := regexp.MustCompile(`^[a-z]+:`)
	checked := 0
	for _, doc := range docs {
		for i, line := range prose(t, doc) {
			for _, m := range link.FindAllStringSubmatch(line, -1) {
				target := m[1]
				if scheme.MatchString(target) {
					continue
				}
				checked++
				file, anchor, _ := strings.Cut(target, "#")
				path := doc
				if file != "" {
					path = filepath.Join(filepath.Dir(doc), file)
				}
				rel, _ := filepath.Rel(root, doc)
				info, err := os.Stat(path)
				if err != nil {
					t.Errorf("%s:%d: %s: no such file", rel, i+1, target)
					continue
				}
				if anchor == "" {
					continue
				}
				if info.IsDir() || !strings.HasSuffix(path, ".md") {
					t.Errorf("%s:%d: %s: an anchor on a file that is not Markdown", rel, i+1, target)
				} else if !headings(t, path)[anchor] {
					t.Errorf("%s:%d: %s: no such heading", rel, i+1, target)
				}
			}
		}
	}
	if checked == 0 {
		t.Fatal("no relative link found: the walk or the pattern is wrong")
	}
}

// prose returns the file's lines with those inside code fences blanked,
// so that line numbers stay the file's.
func prose(t *testing.T, path string) []string {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var lines []string
	fenced := false
	s := bufio.NewScanner(f)
	s.Buffer(make([]byte, 1<<20), 1<<20)
	for s.Scan() {
		line := s.Text()
		if strings.HasPrefix(strings.TrimSpace(line), "```") {
			fenced = !fenced
			line = ""
		} else if fenced {
			line = ""
		}
		lines = append(lines, line)
	}
	if err := s.Err(); err != nil {
		t.Fatal(err)
	}
	return lines
}

var (
	heading  = regexp.MustCompile(`^#{1,6}\s+(.*?)\s*#*\s*$`)
	inline   = regexp.MustCompile(`\[([^\]]*)\]\([^)]*\)`)
	unsluggy = regexp.MustCompile(`[^\p{L}\p{N}_\- ]`)
)

// headings returns the anchors GitHub gives the file's headings: lower
// case, punctuation dropped, spaces as dashes, repeats numbered.
func headings(t *testing.T, path string) map[string]bool {
	t.Helper()
	anchors := map[string]bool{}
	seen := map[string]int{}
	for _, line := range prose(t, path) {
		m := heading.FindStringSubmatch(line)
		if m == nil {
			continue
		}
		slug := strings.ToLower(inline.ReplaceAllString(m[1], "$1"))
		slug = strings.ReplaceAll(unsluggy.ReplaceAllString(slug, ""), " ", "-")
		if n := seen[slug]; n > 0 {
			anchors[slug+"-"+strconv.Itoa(n)] = true
		} else {
			anchors[slug] = true
		}
		seen[slug]++
	}
	return anchors
}

func repoRoot(t *testing.T) string {
	t.Helper()
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if _, err := os.Stat(filepath.Join(dir, "go.mod")); err == nil {
			return dir
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			t.Fatal("no go.mod above the test's folder")
		}
		dir = parent
	}
}
