// parse stub: everything is in cuda_parse_prelude.h
