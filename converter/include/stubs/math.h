// parse stub: CUDA device declarations are in cuda_parse_prelude.h
