package tlsprobe

import (
	"debug/elf"
	"errors"
	"fmt"
)

// function is a function in an ELF file: where its code is in the file
// (uprobes attach at file offsets) and in memory, and its size.
type function struct {
	Offset uint64 // file offset of the entry
	Addr   uint64 // virtual address of the entry
	Size   uint64
}

// symbols finds the named functions in f's symbol tables (.symtab and
// .dynsym), keeping those defined in an executable segment. A name that
// is absent is absent from the result.
func symbols(f *elf.File, names ...string) (map[string]function, error) {
	want := make(map[string]bool, len(names))
	for _, n := range names {
		want[n] = true
	}
	out := map[string]function{}
	var errs []error
	for _, load := range []func() ([]elf.Symbol, error){f.Symbols, f.DynamicSymbols} {
		syms, err := load()
		if err != nil && !errors.Is(err, elf.ErrNoSymbols) {
			errs = append(errs, err)
			continue
		}
		for _, s := range syms {
			if !want[s.Name] || elf.ST_TYPE(s.Info) != elf.STT_FUNC || s.Value == 0 {
				continue
			}
			if _, dup := out[s.Name]; dup {
				continue
			}
			if off, ok := fileOffset(f, s.Value); ok {
				out[s.Name] = function{Offset: off, Addr: s.Value, Size: s.Size}
			}
		}
	}
	if len(out) == 0 && len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return out, nil
}

// fileOffset converts a virtual address into the offset of its byte in
// the file, through the executable PT_LOAD segment that maps it.
func fileOffset(f *elf.File, addr uint64) (uint64, bool) {
	for _, p := range f.Progs {
		if p.Type != elf.PT_LOAD || p.Flags&elf.PF_X == 0 {
			continue
		}
		if p.Vaddr <= addr && addr < p.Vaddr+p.Filesz {
			return addr - p.Vaddr + p.Off, true
		}
	}
	return 0, false
}

// code returns the bytes of fn from the file.
func code(f *elf.File, fn function) ([]byte, error) {
	if fn.Size == 0 || fn.Size > 1<<20 {
		return nil, fmt.Errorf("function of %d bytes", fn.Size)
	}
	for _, s := range f.Sections {
		if s.Type != elf.SHT_PROGBITS || s.Flags&elf.SHF_EXECINSTR == 0 {
			continue
		}
		if s.Addr <= fn.Addr && fn.Addr+fn.Size <= s.Addr+s.Size {
			b := make([]byte, fn.Size)
			if _, err := s.ReadAt(b, int64(fn.Addr-s.Addr)); err != nil {
				return nil, err
			}
			return b, nil
		}
	}
	return nil, fmt.Errorf("no executable section holds %#x", fn.Addr)
}

// checkArch refuses files the probes cannot read the registers of.
func checkArch(f *elf.File) error {
	if f.Class != elf.ELFCLASS64 || f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("%v %v: the TLS uprobes read x86-64 registers", f.Class, f.Machine)
	}
	return nil
}
