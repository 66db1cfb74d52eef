// parse stub: enough of <stdio.h> for host code around kernels to parse (device printf is in the prelude)
#pragma once
typedef struct __rt_parse_FILE FILE;
extern FILE* stdin;
extern FILE* stdout;
extern FILE* stderr;
extern "C" int fprintf(FILE*, const char*, ...);
extern "C" int sprintf(char*, const char*, ...);
extern "C" int snprintf(char*, unsigned long, const char*, ...);
extern "C" int puts(const char*);
extern "C" int fflush(FILE*);
extern "C" FILE* fopen(const char*, const char*);
extern "C" int fclose(FILE*);
