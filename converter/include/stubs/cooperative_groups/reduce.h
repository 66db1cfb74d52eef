// parse stub
