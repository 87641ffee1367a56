package rdmamgr

import (
	"go/ast"
	"go/build"
	"go/parser"
	"go/token"
	"io/fs"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// docSection returns the text of the package doc's section titled heading
// (up to the next heading).
func docSection(t *testing.T, heading string) string {
	t.Helper()
	f, err := parser.ParseFile(token.NewFileSet(), "doc.go", nil, parser.ParseComments|parser.PackageClauseOnly)
	if err != nil {
		t.Fatal(err)
	}
	if f.Doc == nil {
		t.Fatal("doc.go has no package doc")
	}
	text := f.Doc.Text()
	i := strings.Index(text, "# "+heading+"\n")
	if i < 0 {
		t.Fatalf("package doc has no section %q", heading)
	}
	text = text[i+len(heading)+3:]
	if j := strings.Index(text, "\n# "); j >= 0 {
		text = text[:j]
	}
	return text
}

// TestDocListsEveryError: every exported error of errors.go has an entry
// ("- ErrX: ...") in the package doc's Errors section, and every entry
// names an error errors.go declares.
func TestDocListsEveryError(t *testing.T) {
	f, err := parser.ParseFile(token.NewFileSet(), "errors.go", nil, 0)
	if err != nil {
		t.Fatal(err)
	}
	declared := map[string]bool{}
	for _, d := range f.Decls {
		g, ok := d.(*ast.GenDecl)
		if !ok || g.Tok != token.VAR {
			continue
		}
		for _, sp := range g.Specs {
			for _, n := range sp.(*ast.ValueSpec).Names {
				if n.IsExported() && strings.HasPrefix(n.Name, "Err") {
					declared[n.Name] = true
				}
			}
		}
	}
	if len(declared) == 0 {
		t.Fatal("no Err vars found in errors.go")
	}
	listed := map[string]bool{}
	for _, m := range regexp.MustCompile(`(?m)^\s*- (Err\w+):`).FindAllStringSubmatch(docSection(t, "Errors"), -1) {
		listed[m[1]] = true
	}
	for n := range declared {
		if !listed[n] {
			t.Errorf("errors.go declares %s; the package doc's Errors section does not list it", n)
		}
	}
	for n := range listed {
		if !declared[n] {
			t.Errorf("the package doc lists %s; errors.go does not declare it", n)
		}
	}
}

// TestDocListsEveryPackage: every public package of the module (not
// internal, not a command or example, not a test-only directory) is named
// in the package doc's "Where things are" section.
func TestDocListsEveryPackage(t *testing.T) {
	section := docSection(t, "Where things are")
	var pkgs []string
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if !d.IsDir() {
			return nil
		}
		name := d.Name()
		if path != "." && (strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_") ||
			name == "internal" || name == "testdata" || name == "cmd" || name == "examples" || name == "test") {
			return filepath.SkipDir
		}
		p, err := build.ImportDir(path, 0)
		if err != nil || p.Name == "main" {
			return nil // no Go files for this platform, test files only, or a command
		}
		if path == "." {
			path = "rdmamgr"
		}
		pkgs = append(pkgs, filepath.ToSlash(path))
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(pkgs) < 5 {
		t.Fatalf("found only %v: the walk is broken", pkgs)
	}
	for _, p := range pkgs {
		re := regexp.MustCompile(`(^|[\s,(])` + regexp.QuoteMeta(p) + `([\s,:.)]|$)`)
		if !re.MatchString(section) {
			t.Errorf("package %s is not named in the package doc's \"Where things are\"", p)
		}
	}
}
