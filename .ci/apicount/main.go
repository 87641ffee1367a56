// count exported names of a package dir (non-test files), by go/ast
package main

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"os"
	"sort"
	"strings"
)

func main() {
	dir := os.Args[1]
	tags := ""
	if len(os.Args) > 2 {
		tags = os.Args[2]
	}
	_ = tags
	fs := token.NewFileSet()
	pkgs, err := parser.ParseDir(fs, dir, func(fi os.FileInfo) bool { return !strings.HasSuffix(fi.Name(), "_test.go") }, 0)
	if err != nil {
		panic(err)
	}
	names := map[string]bool{}
	for _, p := range pkgs {
		if strings.HasSuffix(p.Name, "_test") || p.Name == "main" && false {
			continue
		}
		for _, f := range p.Files {
			for _, d := range f.Decls {
				switch d := d.(type) {
				case *ast.FuncDecl:
					if !d.Name.IsExported() {
						continue
					}
					if d.Recv != nil {
						t := d.Recv.List[0].Type
						if s, ok := t.(*ast.StarExpr); ok {
							t = s.X
						}
						if ix, ok := t.(*ast.IndexExpr); ok {
							t = ix.X
						}
						id, ok := t.(*ast.Ident)
						if !ok || !id.IsExported() {
							continue
						}
						names["method "+id.Name+"."+d.Name.Name] = true
					} else {
						names["func "+d.Name.Name] = true
					}
				case *ast.GenDecl:
					for _, s := range d.Specs {
						switch s := s.(type) {
						case *ast.TypeSpec:
							if !s.Name.IsExported() {
								continue
							}
							names["type "+s.Name.Name] = true
							if st, ok := s.Type.(*ast.StructType); ok {
								for _, fl := range st.Fields.List {
									for _, n := range fl.Names {
										if n.IsExported() {
											names["field "+s.Name.Name+"."+n.Name] = true
										}
									}
								}
							}
							if it, ok := s.Type.(*ast.InterfaceType); ok {
								for _, fl := range it.Methods.List {
									for _, n := range fl.Names {
										if n.IsExported() {
											names["imethod "+s.Name.Name+"."+n.Name] = true
										}
									}
								}
							}
						case *ast.ValueSpec:
							for _, n := range s.Names {
								if n.IsExported() {
									kind := "var "
									if d.Tok == token.CONST {
										kind = "const "
									}
									names[kind+n.Name] = true
								}
							}
						}
					}
				}
			}
		}
	}
	var l []string
	for n := range names {
		l = append(l, n)
	}
	sort.Strings(l)
	if len(os.Args) > 2 && os.Args[2] == "-list" {
		for _, n := range l {
			fmt.Println(n)
		}
		return
	}
	c := map[string]int{}
	for _, n := range l {
		c[strings.Fields(n)[0]]++
	}
	fmt.Printf("%d\t(types %d, funcs %d, methods %d, fields %d, iface-methods %d, consts %d, vars %d)\n", len(l), c["type"], c["func"], c["method"], c["field"], c["imethod"], c["const"], c["var"])
}
