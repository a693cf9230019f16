package command

import (
	"fmt"
	"io"
	"sort"
	"strings"

	"github.com/urfave/cli/v2"
)

func init() {
	Register(&cli.Command{
		Name:      "completion",
		Usage:     "print a shell completion script (commands, subcommands and flags)",
		ArgsUsage: "bash|zsh|fish",
		Description: `Prints a completion script for the shell to standard output. To enable it:

   bash:  source <(sfstate completion bash)      (or save it under /etc/bash_completion.d/)
   zsh:   source <(sfstate completion zsh)       (in ~/.zshrc)
   fish:  sfstate completion fish > ~/.config/fish/completions/sfstate.fish`,
		Action: runCompletion,
	})
}

func runCompletion(c *cli.Context) error {
	if c.NArg() != 1 {
		return Failf(ExitUsage, "completion takes one shell: bash, zsh or fish")
	}
	tree := completionTree(c.App)
	w := c.App.Writer
	switch c.Args().First() {
	case "bash":
		writeBash(w, tree)
	case "zsh":
		fmt.Fprintln(w, "#compdef sfstate")
		fmt.Fprintln(w, "# sfstate completion for zsh (through bash completion emulation)")
		fmt.Fprintln(w, "autoload -U +X bashcompinit && bashcompinit")
		writeBash(w, tree)
	case "fish":
		writeFish(w, tree)
	default:
		return Failf(ExitUsage, "completion: unknown shell %q (bash, zsh or fish)", c.Args().First())
	}
	return nil
}

// compNode is one (sub)command with its flags, for the scripts.
type compNode struct {
	path  []string // command names from the top
	usage string
	flags []compFlag
	subs  []*compNode
}

type compFlag struct {
	names []string
	usage string
	value bool
}

func completionTree(app *cli.App) *compNode {
	root := &compNode{flags: compFlags(app.Flags)}
	var add func(parent *compNode, cmds []*cli.Command)
	add = func(parent *compNode, cmds []*cli.Command) {
		for _, c := range cmds {
			if c.Hidden || c.Name == "help" {
				continue
			}
			n := &compNode{path: append(append([]string(nil), parent.path...), c.Name), usage: c.Usage, flags: compFlags(c.Flags)}
			parent.subs = append(parent.subs, n)
			add(n, c.Subcommands)
		}
		sort.Slice(parent.subs, func(i, j int) bool { return last(parent.subs[i].path) < last(parent.subs[j].path) })
	}
	add(root, app.Commands)
	return root
}

func last(p []string) string { return p[len(p)-1] }

func compFlags(fs []cli.Flag) []compFlag {
	var out []compFlag
	for _, f := range fs {
		cf := compFlag{names: f.Names(), value: takesValue(f)}
		if d, ok := f.(cli.DocGenerationFlag); ok {
			cf.usage = d.GetUsage()
		}
		out = append(out, cf)
	}
	return append(out, compFlag{names: []string{"help", "h"}, usage: "show help"})
}

func (n *compNode) walk(fn func(*compNode)) {
	fn(n)
	for _, s := range n.subs {
		s.walk(fn)
	}
}

func (n *compNode) key() string {
	if len(n.path) == 0 {
		return "_"
	}
	return strings.Join(n.path, "_")
}

func (f compFlag) dashed() []string {
	var out []string
	for _, n := range f.names {
		out = append(out, dashed(n))
	}
	return out
}

func writeBash(w io.Writer, root *compNode) {
	fmt.Fprintln(w, "# sfstate completion for bash: source <(sfstate completion bash)")
	fmt.Fprintln(w, "declare -gA _sfstate_subs _sfstate_flags _sfstate_valued")
	root.walk(func(n *compNode) {
		var subs, flags, valued []string
		for _, s := range n.subs {
			subs = append(subs, last(s.path))
		}
		for _, f := range n.flags {
			flags = append(flags, f.dashed()...)
			if f.value {
				valued = append(valued, f.dashed()...)
			}
		}
		fmt.Fprintf(w, "_sfstate_subs[%s]=%q\n_sfstate_flags[%s]=%q\n_sfstate_valued[%s]=%q\n",
			n.key(), strings.Join(subs, " "), n.key(), strings.Join(flags, " "), n.key(), strings.Join(valued, " "))
	})
	fmt.Fprint(w, `_sfstate() {
  local cur="${COMP_WORDS[COMP_CWORD]}" key="_" w i skip=""
  for ((i = 1; i < COMP_CWORD; i++)); do
    w="${COMP_WORDS[i]}"
    if [[ -n "$skip" ]]; then skip=""; continue; fi
    if [[ "$w" == -* ]]; then
      [[ "$w" != *=* && " ${_sfstate_valued[$key]} ${_sfstate_valued[_]} " == *" $w "* ]] && skip=1
      continue
    fi
    if [[ " ${_sfstate_subs[$key]} " == *" $w "* ]]; then
      if [[ "$key" == "_" ]]; then key="$w"; else key="${key}_$w"; fi
    fi
  done
  if [[ -n "$skip" ]]; then
    COMPREPLY=($(compgen -f -- "$cur"))
  elif [[ "$cur" == -* ]]; then
    COMPREPLY=($(compgen -W "${_sfstate_flags[$key]} ${_sfstate_flags[_]}" -- "$cur"))
  elif [[ -n "${_sfstate_subs[$key]}" ]]; then
    COMPREPLY=($(compgen -W "${_sfstate_subs[$key]}" -- "$cur"))
  else
    COMPREPLY=($(compgen -f -- "$cur"))
  fi
}
complete -o default -o bashdefault -F _sfstate sfstate
`)
}

func writeFish(w io.Writer, root *compNode) {
	fmt.Fprintln(w, "# sfstate completion for fish: sfstate completion fish > ~/.config/fish/completions/sfstate.fish")
	fmt.Fprintln(w, "complete -c sfstate -f")
	cond := func(n *compNode) string {
		if len(n.path) == 0 {
			return ""
		}
		var parts []string
		for _, p := range n.path {
			parts = append(parts, "__fish_seen_subcommand_from "+p)
		}
		return strings.Join(parts, "; and ")
	}
	root.walk(func(n *compNode) {
		for _, s := range n.subs {
			c := "__fish_use_subcommand"
			if len(n.path) > 0 {
				var names []string
				for _, t := range n.subs {
					names = append(names, last(t.path))
				}
				c = cond(n) + "; and not __fish_seen_subcommand_from " + strings.Join(names, " ")
			}
			fmt.Fprintf(w, "complete -c sfstate -n %s -a %s -d %s\n", fishQuote(c), last(s.path), fishQuote(firstSentence(s.usage)))
		}
		for _, f := range n.flags {
			var line strings.Builder
			line.WriteString("complete -c sfstate")
			if c := cond(n); c != "" {
				line.WriteString(" -n " + fishQuote(c))
			}
			for _, name := range f.names {
				if len(name) == 1 {
					line.WriteString(" -s " + name)
				} else {
					line.WriteString(" -l " + name)
				}
			}
			if f.value {
				line.WriteString(" -r -F")
			}
			line.WriteString(" -d " + fishQuote(firstSentence(f.usage)))
			fmt.Fprintln(w, line.String())
		}
	})
}

func fishQuote(s string) string {
	return "'" + strings.ReplaceAll(strings.ReplaceAll(s, `\`, `\\`), "'", `\'`) + "'"
}

func firstSentence(s string) string {
	if i := strings.Index(s, "; "); i > 0 {
		s = s[:i]
	}
	if len(s) > 80 {
		s = s[:77] + "..."
	}
	return s
}
