package cli

import (
	"context"
	"flag"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
)

// RunCompletion is walhouse completion: it prints a completion script for bash, zsh or fish, made
// from the commands and their flags: commands, subcommands, flag names
// with their descriptions, and file names for a flag's value.
func RunCompletion(_ context.Context, inv *Invocation) error {
	if inv.PlainHelp() {
		return flag.ErrHelp
	}
	if len(inv.Args) != 1 {
		return Usagef("want one shell: bash, zsh or fish")
	}
	spec := completionSpec(inv.cmds)
	switch inv.Args[0] {
	case "bash":
		writeBash(inv.Stdout, spec)
	case "zsh":
		writeZsh(inv.Stdout, spec)
	case "fish":
		writeFish(inv.Stdout, spec)
	default:
		return Usagef("unknown shell %q: want bash, zsh or fish", inv.Args[0])
	}
	return nil
}

// completed is what completion knows of one command.
type completed struct {
	name, summary string
	words         []string // subcommands or arguments
	flags         []completedFlag
}

type completedFlag struct {
	name, help string
	value      bool // takes a value
}

func completionSpec(cmds Commands) []completed {
	var out []completed
	for _, name := range slices.Sorted(maps.Keys(cmds)) {
		c := completed{name: name, summary: cmds[name].Summary, words: cmds[name].Subcommands}
		if fs := cmds.Flags(name); fs != nil {
			fs.VisitAll(func(f *flag.Flag) {
				bf, isBool := f.Value.(interface{ IsBoolFlag() bool })
				c.flags = append(c.flags, completedFlag{name: f.Name, help: shortHelp(f.Usage), value: !(isBool && bf.IsBoolFlag())})
			})
		}
		out = append(out, c)
	}
	return out
}

// shortHelp is the first clause of a flag's usage, for a completion menu.
func shortHelp(usage string) string {
	if i := strings.IndexAny(usage, "(;"); i > 0 {
		usage = usage[:i]
	}
	usage = strings.TrimSpace(usage)
	if len(usage) > 70 {
		usage = usage[:67] + "..."
	}
	return usage
}

func writeBash(w io.Writer, spec []completed) {
	var names []string
	valueFlags := map[string]bool{}
	for _, c := range spec {
		names = append(names, c.name)
		for _, f := range c.flags {
			if f.value {
				valueFlags["--"+f.name] = true
			}
		}
	}
	fmt.Fprint(w, `# bash completion for walhouse: source <(walhouse completion bash)
_walhouse() {
    local cur="${COMP_WORDS[COMP_CWORD]}" prev="${COMP_WORDS[COMP_CWORD-1]}" cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case "${COMP_WORDS[i]}" in
            --config|-config) ((i++)) ;;
            -*) ;;
            *) cmd="${COMP_WORDS[i]}"; break ;;
        esac
    done
    case "$prev" in
        --config|-config|`+strings.Join(slices.Sorted(maps.Keys(valueFlags)), "|")+`)
            COMPREPLY=(); return ;;  # a value: file names (complete -o default)
    esac
    local words
    case "$cmd" in
        "") words="--config --version -h `+strings.Join(names, " ")+`" ;;
`)
	for _, c := range spec {
		words := slices.Clone(c.words)
		for _, f := range c.flags {
			words = append(words, "--"+f.name)
		}
		if c.name == "config" {
			words = append(words, "-h")
		}
		fmt.Fprintf(w, "        %s) words=%q ;;\n", c.name, strings.Join(words, " "))
	}
	fmt.Fprint(w, `    esac
    COMPREPLY=($(compgen -W "$words" -- "$cur"))
}
complete -o default -F _walhouse walhouse
`)
}

func writeZsh(w io.Writer, spec []completed) {
	fmt.Fprint(w, `#compdef walhouse
# zsh completion for walhouse: walhouse completion zsh > "${fpath[1]}/_walhouse"
_walhouse() {
    local -a commands
    commands=(
`)
	for _, c := range spec {
		fmt.Fprintf(w, "        %s\n", zshQuote(c.name+":"+strings.ReplaceAll(c.summary, ":", `\:`)))
	}
	fmt.Fprint(w, `    )
    local cmd i
    for ((i = 2; i < CURRENT; i++)); do
        case ${words[i]} in
            --config|-config) (( i++ )) ;;
            -*) ;;
            *) cmd=${words[i]}; break ;;
        esac
    done
    if [[ -z $cmd ]]; then
        _arguments '--config[configuration file]:file:_files' '--version[print the version]' '-h[help]' '*::command:->command'
        _describe -t commands 'walhouse command' commands
        return
    fi
    words=("${(@)words[i,-1]}")
    (( CURRENT -= i - 1 ))
    case $cmd in
`)
	for _, c := range spec {
		var specs []string
		if len(c.words) > 0 {
			specs = append(specs, zshQuote("1:subcommand:("+strings.Join(c.words, " ")+")"))
		}
		for _, f := range c.flags {
			s := "--" + f.name + "[" + zshEscape(f.help) + "]"
			if f.value {
				s += ":" + f.name + ":_files"
			}
			specs = append(specs, zshQuote(s))
		}
		fmt.Fprintf(w, "        %s) _arguments \\\n            %s ;;\n", c.name, strings.Join(specs, " \\\n            "))
	}
	fmt.Fprint(w, `    esac
}
if [[ "${funcstack[1]}" == "_walhouse" ]]; then
    _walhouse "$@"
else
    compdef _walhouse walhouse
fi
`)
}

// zshEscape escapes the characters _arguments gives a meaning to inside
// a description.
func zshEscape(s string) string {
	return strings.NewReplacer("[", `\[`, "]", `\]`, ":", `\:`).Replace(s)
}

func zshQuote(s string) string { return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'" }

func writeFish(w io.Writer, spec []completed) {
	q := func(s string) string { return "'" + strings.NewReplacer(`\`, `\\`, "'", `\'`).Replace(s) + "'" }
	fmt.Fprintln(w, "# fish completion for walhouse: walhouse completion fish > ~/.config/fish/completions/walhouse.fish")
	fmt.Fprintln(w, "complete -c walhouse -f")
	fmt.Fprintln(w, "complete -c walhouse -n __fish_use_subcommand -l config -r -F -d 'configuration file'")
	fmt.Fprintln(w, "complete -c walhouse -n __fish_use_subcommand -l version -d 'print the version'")
	for _, c := range spec {
		fmt.Fprintf(w, "complete -c walhouse -n __fish_use_subcommand -a %s -d %s\n", c.name, q(c.summary))
	}
	for _, c := range spec {
		cond := q("__fish_seen_subcommand_from " + c.name)
		if len(c.words) > 0 {
			fmt.Fprintf(w, "complete -c walhouse -n %s -a %s\n", cond, q(strings.Join(c.words, " ")))
		}
		for _, f := range c.flags {
			opt := ""
			if f.value {
				opt = " -r -F"
			}
			fmt.Fprintf(w, "complete -c walhouse -n %s -l %s%s -d %s\n", cond, f.name, opt, q(f.help))
		}
	}
}
