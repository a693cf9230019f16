package layering

import (
	"bufio"
	"fmt"
	"go/parser"
	"go/token"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"testing"
)

// The layers, lowest first. A package may import packages of its own layer
// or of lower ones, never of a higher one (non-test files; tests may import
// anything). README.md "Layering" describes the same table.
const (
	layerBase      = iota // no imports of the module, or only of base
	layerCodecs           // Flink's binary formats
	layerEngine           // the state engine (RocksDB via cgo, heap)
	layerSavepoint        // savepoint reading and writing
	layerAnalysis         // tools over savepoints
	layerState            // operator state on the engine
	layerServices         // checkpoints and canonical savepoints of engine state
	layerTools            // migrations, restores, conversions
	layerHarness          // the demo and benchmark harnesses
	layerCommands         // the CLI
)

var layerNames = []string{"base", "codecs", "engine", "savepoint", "analysis", "state", "services", "tools", "harness", "commands"}

// layers assigns every package of the module (path relative to the module
// root; "dir/..." covers dir and everything below it) to its layer. A
// package missing here fails the test: add it where it belongs.
var layers = map[string]int{
	"errclass":                  layerBase,
	"keygroups":                 layerBase,
	"s3":                        layerBase,
	"checkpoint/manifest":       layerBase,
	"engine/rowcodec":           layerBase,
	"savepoint/internal/binfmt": layerBase,
	"internal/fixtures":         layerBase,
	"internal/fuzzcorpus":       layerBase,
	"internal/progress":         layerBase,
	"internal/testutil":         layerBase,
	"internal/layering":         layerBase,

	"savepoint/javaser":    layerCodecs,
	"savepoint/serde":      layerCodecs,
	"savepoint/keyed":      layerCodecs,
	"savepoint/flinkwrite": layerCodecs,

	"engine": layerEngine,

	"savepoint":        layerSavepoint,
	"savepoint/digest": layerSavepoint,
	"savepoint/native": layerSavepoint,

	"verify":      layerAnalysis,
	"statediff":   layerAnalysis,
	"stateexport": layerAnalysis,
	"rescale":     layerAnalysis,
	"convert":     layerAnalysis, // rescale's rewriter in conversion mode; verify digests native sources through it

	"recordstore": layerState,

	"canonical":  layerServices,
	"checkpoint": layerServices,

	"migrate":        layerTools,
	"verify/restore": layerTools,

	"demo":               layerHarness,
	"internal/bench/...": layerHarness,

	"cmd/...": layerCommands,
}

// cgoRoot is the only directory whose files may use cgo or RocksDB. It is
// also sealed: its packages import, of the module, only each other, the
// base layer and Flink's binary formats (the codecs layer: the engine keeps
// values in Flink's encodings and describes its states with Flink's
// serializer snapshots), so that nothing about savepoint files, S3 or the
// tools leaks into it. The services that put engine state into checkpoints
// and savepoints live above it, in checkpoint/ and canonical/.
const cgoRoot = "engine"

// rocksdbModule is RocksDB's Go binding; cgoPackage is cgo's pseudo-package.
// Both are spelled in pieces so that this file, which names them to forbid
// them, does not itself read as a use of them to a text search.
const (
	rocksdbModule = "github.com/linxGnu/" + "groc" + "ksdb"
	cgoPackage    = "C"
	cgoImport     = "import " + `"` + cgoPackage + `"`
)

// testSupport (local S3 servers, fault proxies, fixtures) may be imported
// only by test files and by the harness and command layers.
const testSupport = "internal/testutil"

// testSupportOK reports whether non-test files of pkg may import
// testSupport.
func testSupportOK(pkg string) bool {
	l, ok := layerOf(pkg)
	return pkg == testSupport || ok && l >= layerHarness
}

func under(pkg, dir string) bool { return pkg == dir || strings.HasPrefix(pkg, dir+"/") }

// layerOf returns the layer of pkg (exact entry, else the longest "dir/..."
// entry covering it).
func layerOf(pkg string) (int, bool) {
	if l, ok := layers[pkg]; ok && !strings.HasSuffix(pkg, "...") {
		return l, true
	}
	best, layer := "", 0
	for k, l := range layers {
		if d, ok := strings.CutSuffix(k, "/..."); ok && under(pkg, d) && len(d) > len(best) {
			best, layer = d, l
		}
	}
	return layer, best != ""
}

// goFile is the imports of one Go file.
type goFile struct {
	path    string // relative to the module root
	pkg     string // directory, relative to the module root ("." for the root)
	test    bool
	imports []imp
}

type imp struct {
	path string
	pos  token.Position
}

// moduleRoot finds the directory of go.mod above the test's directory and
// the module path it declares.
func moduleRoot(t *testing.T) (root, module string) {
	dir, err := os.Getwd()
	if err != nil {
		t.Fatal(err)
	}
	for {
		if f, err := os.Open(filepath.Join(dir, "go.mod")); err == nil {
			sc := bufio.NewScanner(f)
			for sc.Scan() {
				if m, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "module "); ok {
					f.Close()
					return dir, strings.Trim(strings.TrimSpace(m), `"`)
				}
			}
			f.Close()
			t.Fatalf("%s: no module line", filepath.Join(dir, "go.mod"))
		}
		up := filepath.Dir(dir)
		if up == dir {
			t.Fatal("no go.mod above the test's directory")
		}
		dir = up
	}
}

// parseTree reads the imports of every Go file of the module (build
// constraints ignored: every file counts), skipping testdata, hidden and
// underscore directories, and nested modules.
func parseTree(t *testing.T, root string) (files []goFile, nonGo []string) {
	fset := token.NewFileSet()
	err := filepath.WalkDir(root, func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		rel, _ := filepath.Rel(root, p)
		rel = filepath.ToSlash(rel)
		name := d.Name()
		if d.IsDir() {
			if rel != "." && (name == "testdata" || name == "vendor" || strings.HasPrefix(name, ".") || strings.HasPrefix(name, "_")) {
				return filepath.SkipDir
			}
			if rel != "." {
				if _, err := os.Stat(filepath.Join(p, "go.mod")); err == nil {
					return filepath.SkipDir
				}
			}
			return nil
		}
		switch filepath.Ext(name) {
		case ".c", ".cc", ".cpp", ".cxx", ".h", ".hh", ".hpp", ".m", ".s", ".S", ".swig", ".syso":
			nonGo = append(nonGo, rel)
			return nil
		case ".go":
		default:
			return nil
		}
		f, err := parser.ParseFile(fset, p, nil, parser.ImportsOnly)
		if err != nil {
			return err
		}
		g := goFile{path: rel, pkg: filepath.ToSlash(filepath.Dir(rel)), test: strings.HasSuffix(name, "_test.go")}
		for _, s := range f.Imports {
			ip, err := strconv.Unquote(s.Path.Value)
			if err != nil {
				return fmt.Errorf("%s: %w", rel, err)
			}
			pos := fset.Position(s.Pos())
			pos.Filename = rel
			g.imports = append(g.imports, imp{ip, pos})
		}
		files = append(files, g)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) == 0 {
		t.Fatal("no Go files found")
	}
	return files, nonGo
}

// violations applies the rules to the tree at root.
func violations(t *testing.T, root, module string) []string {
	files, nonGo := parseTree(t, root)
	var out []string
	bad := func(pos token.Position, format string, args ...any) {
		out = append(out, fmt.Sprintf("%s:%d: %s", pos.Filename, pos.Line, fmt.Sprintf(format, args...)))
	}
	for _, p := range nonGo {
		if !under(p, cgoRoot) {
			out = append(out, fmt.Sprintf("%s: C/assembly source outside %s/", p, cgoRoot))
		}
	}
	unknown := map[string]bool{}
	for _, f := range files {
		inEngine := under(f.pkg, cgoRoot)
		from, known := layerOf(f.pkg)
		if !known && !unknown[f.pkg] {
			unknown[f.pkg] = true
			out = append(out, fmt.Sprintf("%s: package %s has no layer in the table", f.path, f.pkg))
		}
		for _, im := range f.imports {
			if !inEngine && im.path == cgoPackage {
				bad(im.pos, "%s outside %s/", cgoImport, cgoRoot)
			}
			if !inEngine && (im.path == rocksdbModule || strings.HasPrefix(im.path, rocksdbModule+"/")) {
				bad(im.pos, "%s imported outside %s/ (use the engine's native API)", im.path, cgoRoot)
			}
			dep, ok := strings.CutPrefix(im.path, module+"/")
			if !ok || f.test {
				continue
			}
			if dep == testSupport && !testSupportOK(f.pkg) {
				bad(im.pos, "library package %s imports %s (only tests and the harness and command layers may)", f.pkg, testSupport)
			}
			to, ok := layerOf(dep)
			if inEngine && !under(dep, cgoRoot) && (!ok || to > layerCodecs) {
				bad(im.pos, "%s imports %s: %s/ is sealed (only its own packages, the base and the codecs layers)", f.pkg, dep, cgoRoot)
			}
			if known && ok && to > from {
				bad(im.pos, "%s (layer %s) imports %s of the higher layer %s", f.pkg, layerNames[from], dep, layerNames[to])
			}
		}
	}
	sort.Strings(out)
	return out
}

// TestLayering enforces the rules on the module's tree.
func TestLayering(t *testing.T) {
	root, module := moduleRoot(t)
	for _, v := range violations(t, root, module) {
		t.Error(v)
	}
}

// TestLayeringCatches runs the rules over a small generated tree that
// breaks each of them once, so that a rule that stops firing is noticed.
func TestLayeringCatches(t *testing.T) {
	root := t.TempDir()
	write := func(rel, src string) {
		p := filepath.Join(root, filepath.FromSlash(rel))
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	write("go.mod", "module example.com/m\n")
	write("engine/e.go", "package engine\n\nimport (\n\t\""+cgoPackage+"\"\n\t\""+rocksdbModule+"\"\n)\n")
	write("engine/shim.c", "int x;\n")
	write("keygroups/k.go", "package keygroups\n\nimport _ \"example.com/m/engine\"\n")
	write("recordstore/r.go", "package recordstore\n\n// #include <x.h>\n"+cgoImport+"\nimport _ \"example.com/m/internal/testutil\"\n")
	write("recordstore/r_test.go", "package recordstore\n\nimport _ \"example.com/m/cmd/x\"\n")
	write("migrate/m.go", "package migrate\n\nimport _ \""+rocksdbModule+"\"\n")
	write("migrate/shim.h", "\n")
	write("internal/bench/x/b.go", "package x\n\nimport _ \"example.com/m/internal/testutil\"\n")
	write("cmd/x/main.go", "package main\n\nimport _ \"example.com/m/internal/testutil\"\n")
	write("demo/d.go", "package demo\n\nimport _ \"example.com/m/internal/testutil\"\n")
	write("internal/testutil/t.go", "package testutil\n")
	write("newpkg/n.go", "package newpkg\n")
	write("engine/testdata/bad.go", "package bad\n\n"+cgoImport+"\n")
	write("engine/rowcodec/s.go", "package rowcodec\n\nimport (\n\t_ \"example.com/m/keygroups\"\n\t_ \"example.com/m/savepoint/keyed\"\n)\n")
	write("engine/s.go", "package engine\n\nimport (\n\t_ \"example.com/m/savepoint/flinkwrite\"\n\t_ \"example.com/m/s3\"\n\t_ \"example.com/m/checkpoint\"\n)\n")
	got := violations(t, root, "example.com/m")
	want := []string{
		"engine/rowcodec/s.go:5: engine/rowcodec (layer base) imports savepoint/keyed of the higher layer codecs",
		"engine/s.go:6: engine (layer engine) imports checkpoint of the higher layer services",
		"engine/s.go:6: engine imports checkpoint: engine/ is sealed (only its own packages, the base and the codecs layers)",
		"keygroups/k.go:3: keygroups (layer base) imports engine of the higher layer engine",
		"migrate/m.go:3: " + rocksdbModule + " imported outside engine/ (use the engine's native API)",
		"migrate/shim.h: C/assembly source outside engine/",
		"newpkg/n.go: package newpkg has no layer in the table",
		"recordstore/r.go:4: " + cgoImport + " outside engine/",
		"recordstore/r.go:5: library package recordstore imports internal/testutil (only tests and the harness and command layers may)",
	}
	if strings.Join(got, "\n") != strings.Join(want, "\n") {
		t.Fatalf("violations:\n%s\nwant:\n%s", strings.Join(got, "\n"), strings.Join(want, "\n"))
	}
}

// TestLayerTable checks the table itself: every name is a layer, and
// patterns end in "/...".
func TestLayerTable(t *testing.T) {
	if len(layerNames) != layerCommands+1 {
		t.Fatalf("%d layer names for %d layers", len(layerNames), layerCommands+1)
	}
	for k, l := range layers {
		if l < 0 || l > layerCommands {
			t.Errorf("%s: layer %d", k, l)
		}
		if strings.Contains(k, "...") && !strings.HasSuffix(k, "/...") {
			t.Errorf("%s: a pattern is dir/...", k)
		}
	}
	if l, ok := layerOf("cmd/sfstate/command"); !ok || l != layerCommands {
		t.Error("cmd/... does not cover cmd/sfstate/command")
	}
	if l, ok := layerOf("checkpoint"); !ok || l != layerServices {
		t.Error("checkpoint is not in the services layer")
	}
}
